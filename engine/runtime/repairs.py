"""The workflow side of an operator's repairs (``process.set_variables``, ``process.skip``,
``process.rewind``; the use cases are ``engine.repairs``).

A repair is checked where it is asked, against the stored state restored with an engine that runs
nothing (``checked``: which tasks it acts on, what it would cancel, or ``InvalidParamsError`` naming
why not), and applied by the runner as the event of a ``repair`` job (``apply``): the only code that
steps SpiffWorkflow applies it, and the advance's contributors cancel, open and drop the rows
(tasks, timers, subscriptions, the chat's outbox) that the new state implies.

Skip completes the waiting (or failed) tasks of an element without running them
(``Task.complete``); rewind is SpiffWorkflow 3.2's ``reset_from_task_id`` to the newest completed
task of an element. Refused where SpiffWorkflow cannot restore the state: an element inside a
multi-instance or loop, inside a subprocess (or a called process) that has ended, or no longer in
the stored tree (passed so long ago that it was pruned: ``engine.store.pruning``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from SpiffWorkflow.bpmn.specs.mixins.multiinstance_task import LoopTask
from SpiffWorkflow.bpmn.specs.mixins.subworkflow_task import CallActivity, SubWorkflowTask
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.exceptions import TaskNotFoundException
from SpiffWorkflow.util.task import TaskState

from bpmn import all_task_specs
from engine.errors import InvalidParamsError
from engine.runtime.outcome import WAITING_STATES, current_variables, kind_of
from engine.sandbox.script_engine import NOTHING_RUNS
from engine.store import workflows

SKIP, REWIND, SET_VARIABLES = "skip", "rewind", "set_variables"
_OPEN = WAITING_STATES | TaskState.ERROR


def restored(state: str, specs: tuple) -> BpmnWorkflow:
    """The stored state, to read and to try a repair on (nothing it holds can run)."""
    return workflows.restore_workflow(state, specs, NOTHING_RUNS)


@dataclass
class Checked:
    """What a repair acts on: the SpiffWorkflow tasks (their ids travel in the job), and the
    elements it cancels (``{element_id, kind}``: an open task after a rewind's target, the
    skipped element itself)."""

    task_ids: list[str]
    cancelled: list[dict[str, Any]] = field(default_factory=list)
    cancelled_task_ids: list[str] = field(default_factory=list)  # the SpiffWorkflow ids of what it cancels


def check_element(specs: tuple, element_id: str) -> None:
    """InvalidParamsError unless ``element_id`` is an element of the definition (called processes too)."""
    if not any(spec.bpmn_id == element_id for spec in all_task_specs(*specs)):
        raise InvalidParamsError(f"Element '{element_id}' is not in this instance's definition.",
                                 data={"param": "element_id", "element_id": element_id})


def check_skip(workflow: BpmnWorkflow, element_id: str) -> Checked:
    """The open tasks of ``element_id`` that a skip completes: where the instance waits, or the
    element it failed at. A subprocess, call activity or multi-instance as a whole is refused:
    skip the element it waits at inside."""
    tasks = [task for task in _open(workflow) if task.task_spec.bpmn_id == element_id]
    if not tasks:
        raise InvalidParamsError(f"The instance is not waiting at element '{element_id}' and did not fail there, so "
                                 "it cannot be skipped; process.status names where it waits.",
                                 data={"param": "element_id", "element_id": element_id, "cause": "not_waiting_here"})
    if any(isinstance(task.task_spec, (SubWorkflowTask, LoopTask)) for task in tasks):
        raise InvalidParamsError(f"Element '{element_id}' is a subprocess, call activity or loop that holds other "
                                 "elements: skip the element it waits at inside it.",
                                 data={"param": "element_id", "element_id": element_id, "cause": "container"})
    ids = [str(task.id) for task in tasks]
    return Checked(ids, [{"element_id": element_id, "kind": kind_of(tasks[0].task_spec)}], ids)


def check_rewind(workflow: BpmnWorkflow, element_id: str) -> Checked:
    """The newest completed task of ``element_id`` a rewind goes back to, and the open tasks it
    cancels (tried on ``workflow``, which is changed: pass a restored copy)."""
    target = _newest_completed(workflow, element_id)
    where = _refusal(workflow, target)
    if where is not None:
        raise InvalidParamsError(f"The instance cannot go back to element '{element_id}': {where[1]}",
                                 data={"param": "element_id", "element_id": element_id, "cause": where[0]})
    before = {task.id: task for task in _open(workflow) if _shown(task)}
    workflow.reset_from_task_id(target.id)
    after = {task.id for task in _open(workflow)}
    gone = [task for task_id, task in before.items() if task_id not in after and task_id != target.id]
    cancelled = [{"element_id": task.task_spec.bpmn_id, "kind": kind_of(task.task_spec)} for task in gone]
    return Checked([str(target.id)], cancelled, [str(task.id) for task in gone])


def _newest_completed(workflow: BpmnWorkflow, element_id: str):
    # (Filtered here: get_tasks(state=COMPLETED) misses the finished children of a running multi-instance.)
    passed = [task for task in workflow.get_tasks()
              if task.state == TaskState.COMPLETED and task.task_spec.bpmn_id == element_id]
    if not passed:
        waiting = any(task.task_spec.bpmn_id == element_id for task in _open(workflow))
        said = ("it waits there now and has not passed it yet" if waiting else
                "it has not passed it (or passed it so long ago that the step is no longer kept)")
        raise InvalidParamsError(f"The instance cannot go back to element '{element_id}': {said}.",
                                 data={"param": "element_id", "element_id": element_id,
                                       "cause": "waiting_here" if waiting else "not_passed"})
    return max(passed, key=lambda task: task.last_state_change)


def _refusal(workflow: BpmnWorkflow, task) -> tuple[str, str] | None:
    """Why SpiffWorkflow cannot restore the state at ``task``, or None."""
    ancestor = task.parent
    while ancestor is not None:
        if isinstance(ancestor.task_spec, LoopTask):
            return ("multi_instance", f"it is inside the multi-instance or loop '{ancestor.task_spec.bpmn_id}', "
                    "whose instances SpiffWorkflow cannot restore one by one.")
        ancestor = ancestor.parent
    sub = task.workflow
    while sub is not workflow and sub.parent_task_id is not None:
        holder = workflow.get_task_from_id(sub.parent_task_id)
        if holder.state & (TaskState.COMPLETED | TaskState.CANCELLED):
            if isinstance(holder.task_spec, CallActivity):
                return ("call_activity_ended", f"it belongs to the process called by '{holder.task_spec.bpmn_id}', "
                        "which has finished; go back to the call activity itself.")
            return ("subprocess_ended", f"it is inside the subprocess '{holder.task_spec.bpmn_id}', which has "
                    "ended; go back to the subprocess itself.")
        if isinstance(holder.task_spec, LoopTask) or isinstance(holder.parent.task_spec, LoopTask):
            return ("multi_instance", f"it is inside the multi-instance '{holder.task_spec.bpmn_id}'.")
        sub = holder.workflow
    return None


def _open(workflow: BpmnWorkflow) -> list:
    return [task for task in workflow.get_tasks() if task.state & _OPEN]


def _shown(task) -> bool:
    return bool(task.task_spec.bpmn_id) and not isinstance(task.task_spec, (SubWorkflowTask, LoopTask))


def set_variables(workflow: BpmnWorkflow, variables: dict[str, Any], remove: list[str]) -> dict[str, Any]:
    """Write ``variables`` into, and ``remove`` from, every open task's data (and the last task's,
    for an instance that waits at none); the instance's variables after the change. A failed
    task's parent too: ``process.retry`` resets the task, which then takes its parent's data."""
    tasks = _open(workflow) or ([workflow.last_task] if workflow.last_task is not None else [])
    tasks += [task.parent for task in tasks if task.state == TaskState.ERROR and task.parent is not None]
    for task in tasks:
        task.data.update(variables)
        for name in remove:
            task.data.pop(name, None)
    return current_variables(workflow)


def apply(workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow | None:
    """The event of a ``repair`` job (``engine.runtime.events``): the change it carries, checked
    when it was asked and applied before the engine steps on."""
    if workflow is None:
        return workflow
    action, variables = payload["action"], payload.get("variables") or {}
    if action == SET_VARIABLES:
        set_variables(workflow, variables, payload.get("remove") or [])
        return workflow
    for task_id in payload["task_ids"]:
        task = _task(workflow, task_id)
        if task is None:
            continue  # gone since it was checked (nothing else was due then: not expected)
        if action == SKIP and task.state & _OPEN:
            task.data.update(variables)
            task.complete()
        elif action == REWIND:
            workflow.reset_from_task_id(task.id)
            task.data.update(variables)
    return workflow


def _task(workflow: BpmnWorkflow, task_id: str):
    try:
        return workflow.get_task_from_id(UUID(task_id))
    except (TaskNotFoundException, ValueError):
        return None
