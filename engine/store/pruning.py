"""Pruning what an instance has finished from its SpiffWorkflow task tree before each save, so that
the cost of a step does not grow with the instance's history.

SpiffWorkflow 3.2 keeps every task an instance ever ran: a loop adds tasks per pass, and every save
serialized, and every load and engine step walked, all of them (a loop of 500 waits ran past the
depth guardrail, and a step at pass 100 cost six times one at pass 10). Before a save of a tree
larger than ``PRUNE_ABOVE`` tasks (smaller ones, most instances, are saved whole), ``prune``
removes the finished tasks that nothing will read again, re-attaches the kept tasks to their
nearest kept ancestor, and returns a row per removed element (what ``process.path`` shows:
``[at, process, task spec, from element, state]``), which the save appends to ``instance_steps``
in the same transaction. ``engine.insight.read_path`` reads those rows plus the pruned tree.

A finished task is kept when SpiffWorkflow may still read it:

* the root, the ``Start`` and ``End`` tasks, and the workflow's ``last_task``;
* the parent of a task that is not finished (a task inherits its parent's data when it becomes
  ready; a join looks at its inputs' parents; ``process.retry`` resets a failed task from its parent)
  and the children of one (a multi-instance task collects its children; a boundary split's
  children are the activity and its events);
* every task of a join (parallel, inclusive) that still has a task waiting, with their parents:
  a join counts the inputs that arrived by the (cancelled) join tasks of earlier branches and
  merges their parents' data when it fires;
* the split a waiting boundary or start event join looks for (``find_ancestor``);
* the newest completed end event of each end event that names ``output_keys`` (the keys of every
  end event the instance reached are its answer).

A kept task whose parent was removed carries the element its flow came from (``FROM``, a key of
Baton's in the task's ``internal_data``; Baton state version 2), so the path still draws that flow.
The embedded subprocess (or called process) of a removed task is removed with it, its elements
logged. Tasks that failed (ERROR) are never removed.
"""
from __future__ import annotations

from typing import Any

from SpiffWorkflow.bpmn.specs.mixins.events.end_event import EndEvent
from SpiffWorkflow.bpmn.specs.mixins.unstructured_join import UnstructuredJoin
from SpiffWorkflow.util.task import TaskState

from bpmn import spiff_internals as spiff

# A tree of at most this many tasks (subprocesses' included) is saved whole: most instances end
# below it and never pay for a pass or a row; one that loops is pruned whenever it grows past it.
PRUNE_ABOVE = 40
FROM = "baton_from"  # internal_data key: the element a re-attached task's flow came from (or None)
_GONE = TaskState.COMPLETED | TaskState.CANCELLED  # what may be removed; ERROR stays for retry
_ALWAYS = ("Start", "End")


def prune(workflow, above: int = PRUNE_ABOVE) -> list[list[Any]]:
    """Remove what ``workflow`` (a BpmnWorkflow, changed in place) no longer needs, if it holds more
    than ``above`` tasks; the path rows of the removed elements, oldest first."""
    rows: list[list[Any]] = []
    if len(workflow.tasks) + sum(len(sub.tasks) for sub in workflow.subprocesses.values()) <= above:
        return rows
    _prune(workflow, workflow, rows)
    for task_id in list(workflow.subprocesses):
        subprocess = workflow.subprocesses.get(task_id)  # gone: removed with its removed parent
        parent = _task(workflow, task_id)
        if subprocess is not None and parent is not None and not parent.has_state(_GONE):
            _prune(workflow, subprocess, rows)
    rows.sort(key=lambda row: row[0])
    return rows


def _task(top, task_id):
    """A task of the workflow or of any of its subprocesses (SpiffWorkflow's lookup raises)."""
    found = top.tasks.get(task_id)
    if found is None:
        for subprocess in top.subprocesses.values():
            found = subprocess.tasks.get(task_id)
            if found is not None:
                break
    return found


def _prune(top, workflow, rows: list[list[Any]]) -> None:
    keep = _needed(workflow)
    process = workflow.spec.name
    root = workflow.task_tree
    children: dict = {root.id: []}
    removed = []
    # Depth first from the root, in child order, carrying the nearest kept ancestor (the new
    # parent) and the element the flow into each task came from.
    stack = [(child, root, None) for child in reversed(root.children)]
    while stack:
        task, anchor, source = stack.pop()
        source = task.internal_data[FROM] if FROM in task.internal_data else source
        if task.id in keep:
            children[anchor.id].append(task.id)
            if spiff.parent_id(task) != anchor.id:
                task.internal_data[FROM] = source
                spiff.set_parent_id(task, anchor.id)
            children[task.id] = []
            anchor = task
        else:
            removed.append(task)
            if task.task_spec.bpmn_id:
                rows.append([task.last_state_change, process, task.task_spec.name, source, task.state])
        below = task.task_spec.bpmn_id or source
        stack.extend((child, anchor, below) for child in reversed(task.children))
    for task_id, kept in children.items():
        spiff.set_child_ids(workflow.tasks[task_id], kept)
    for task in removed:
        if task.id in top.subprocesses:
            _log_subprocess(top, top.subprocesses[task.id], rows)
            top.delete_subprocess(task)
    for task in removed:
        del workflow.tasks[task.id]


def _log_subprocess(top, subprocess, rows: list[list[Any]]) -> None:
    """The rows of every element of a subprocess that goes with its (removed) task."""
    process = subprocess.spec.name
    stack = [(child, None) for child in reversed(subprocess.task_tree.children)]
    while stack:
        task, source = stack.pop()
        source = task.internal_data[FROM] if FROM in task.internal_data else source
        if task.task_spec.bpmn_id:
            rows.append([task.last_state_change, process, task.task_spec.name, source, task.state])
        if task.id in top.subprocesses:
            _log_subprocess(top, top.subprocesses[task.id], rows)
        below = task.task_spec.bpmn_id or source
        stack.extend((child, below) for child in reversed(task.children))


def _needed(workflow) -> set:
    """The ids of the tasks of one (sub)workflow that stay (the module docstring says why)."""
    keep = {workflow.task_tree.id}
    if workflow.last_task is not None:
        keep.add(workflow.last_task.id)
    waiting_joins, end_events = set(), {}
    for task in workflow.tasks.values():
        spec = task.task_spec
        if spec.name in _ALWAYS:
            keep.add(task.id)
        elif not task.has_state(_GONE):
            keep.add(task.id)
            keep.update(spiff.child_ids(task))
            if spiff.parent_id(task) is not None:
                keep.add(spiff.parent_id(task))
            if isinstance(spec, UnstructuredJoin):
                waiting_joins.add(spec)
            split = getattr(spec, "split_task", None)
            if split:
                ancestor = task.find_ancestor(split)
                if ancestor is not None:
                    keep.add(ancestor.id)
        elif (task.state == TaskState.COMPLETED and isinstance(spec, EndEvent)
              and spec.extensions.get("properties", {}).get("output_keys")):
            newest = end_events.get(spec.name)
            if newest is None or task.last_state_change >= newest.last_state_change:
                end_events[spec.name] = task
    keep.update(task.id for task in end_events.values())
    if waiting_joins:
        # A join skips its own ancestors (earlier passes of a loop); the others it counts and merges.
        ancestors = set()
        for task in workflow.tasks.values():
            if task.task_spec in waiting_joins and not task.has_state(_GONE):
                parent = task.parent
                while parent is not None and parent.id not in ancestors:
                    ancestors.add(parent.id)
                    parent = parent.parent
        for task in workflow.tasks.values():
            if task.task_spec in waiting_joins and task.id not in ancestors:
                keep.add(task.id)
                if spiff.parent_id(task) is not None:
                    keep.add(spiff.parent_id(task))
    return keep
