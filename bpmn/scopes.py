"""Scopes: event subprocesses, and the way errors and escalations climb out of subprocesses.

SpiffWorkflow 3.2 gets three things wrong here, measured with its own test shapes:

* An event subprocess started by a message, error or escalation is connected to its parent
  *while the parent runs* (``BpmnStartTask.trigger_wf`` rewires the shared spec), so every later
  instance of a cached spec behaves differently, and the triggered subprocess ends nowhere.
  Baton connects every event subprocess from the start instead: its start event waits like any
  catch event (``BatonProcessParser``).
* A scope never finishes while one of its event subprocesses waits (the end join waits for every
  token), and an interrupting one runs alongside the scope it should stop. ``ScopeEndJoin`` ends
  the scope without its idle event subprocesses, cancelling them; ``InterruptingStartEvent``
  cancels the rest of its scope when it fires. Both kinds of start (``EventSubprocessStart``)
  begin with the scope's current variables rather than those it had when it started.
* Errors and escalations go to any waiting catcher of the instance. ``deliver_in_scope`` looks in
  the thrower's scope first (its event subprocesses, then boundary events on the activity that
  runs it), then in each enclosing scope, as BPMN says.
"""
from __future__ import annotations

from SpiffWorkflow.bpmn.specs.defaults import StartEvent
from SpiffWorkflow.bpmn.specs.mixins.events.intermediate_event import BoundaryEvent
from SpiffWorkflow.bpmn.specs.mixins.events.start_event import StartEvent as StartEventMixin
from SpiffWorkflow.bpmn.specs.mixins.subworkflow_task import EventSubprocess
from SpiffWorkflow.util.task import TaskState

from bpmn.spiff_internals import EndJoin, update

_BUSY = TaskState.READY | TaskState.STARTED | TaskState.ERROR


class EventSubprocessStart(StartEvent):
    """Start event of an event subprocess: it starts from the variables its scope has now (the
    event subprocess was created with the scope, so its own copy is the scope's first variables);
    a message's or error's variables then go on top."""

    def _run_hook(self, my_task):
        owner = _event_subprocess_task(my_task)
        if owner is not None:
            my_task.data.update(scope_variables(owner.workflow))
        return super()._run_hook(my_task)


class InterruptingStartEvent(EventSubprocessStart):
    """Start event of an interrupting event subprocess: firing it cancels the rest of its scope."""

    def _run_hook(self, my_task):
        result = super()._run_hook(my_task)
        owner = _event_subprocess_task(my_task)
        if owner is not None:
            for task in owner.workflow.get_tasks(state=TaskState.NOT_FINISHED_MASK, skip_subprocesses=True):
                if task is not owner and not task.is_descendant_of(owner) and not owner.is_descendant_of(task):
                    task.cancel()  # a subprocess task cancels its subprocess too
        return result


class ScopeEndJoin(EndJoin):
    """The end of a process or subprocess: waits for every token except idle event subprocesses,
    which it cancels when the scope ends (BPMN: they live only while their scope runs)."""

    def _check_threshold_unstructured(self, my_task):
        # SpiffWorkflow's check, walking the tree the same way, with idle event subprocesses skipped.
        todo = [my_task.workflow.task_tree]
        while todo:
            task = todo.pop()
            if task is my_task or is_idle_event_subprocess(task):
                continue
            if not task.has_state(TaskState.FINISHED_MASK):
                return False
            if task.task_spec.name != self.name:
                todo.extend(task.children)
        return True

    def _run_hook(self, my_task):
        # Only a scope with an event subprocess can hold one (a walk of the whole tree otherwise).
        if any(isinstance(spec, EventSubprocess) for spec in my_task.workflow.spec.task_specs.values()):
            for task in my_task.workflow.get_tasks(state=TaskState.NOT_FINISHED_MASK, skip_subprocesses=True):
                if is_idle_event_subprocess(task):
                    task.cancel()
        return super()._run_hook(my_task)


def is_idle_event_subprocess(task) -> bool:
    """An event subprocess task whose start event has not fired (or whose run is over)."""
    if not isinstance(task.task_spec, EventSubprocess) or task.has_state(TaskState.FINISHED_MASK):
        return False
    subprocess = task.workflow.top_workflow.subprocesses.get(task.id)
    if subprocess is None:
        return True
    for inner in subprocess.get_tasks(state=TaskState.NOT_FINISHED_MASK):
        if inner.has_state(_BUSY):
            return False
        if inner.state == TaskState.WAITING and not (
                inner.workflow is subprocess and isinstance(inner.task_spec, StartEventMixin)):
            return False
    return True


def scope_variables(workflow) -> dict:
    """The variables of a scope's running tokens (merged, in tree order), event subprocesses aside."""
    merged: dict = {}
    for task in workflow.get_tasks(state=_BUSY | TaskState.WAITING, skip_subprocesses=True):
        if not isinstance(task.task_spec, EventSubprocess):
            merged.update(task.data)
    return merged


def connect_event_subprocess(process_spec, task_spec) -> None:
    """Wire an event subprocess into its scope from the start (instead of Spiff's trigger list)."""
    process_spec.start.connect(task_spec)
    task_spec.connect(process_spec.end)


def deliver_in_scope(my_task, event) -> bool:
    """Hand a thrown error/escalation to the catchers of the nearest scope that has one."""
    top = my_task.workflow.top_workflow
    waiting = list(top.event_manager.tasks.values())
    scope = my_task.workflow
    while scope is not None:
        owner = top.get_task_from_id(scope.parent_task_id) if scope.parent_task_id else None
        in_scope = [t for t in waiting if _scope_of_event_subprocess_start(t) is scope]
        on_owner = [t for t in waiting if owner is not None and _attached_activity(t) in (owner, owner.parent)]
        for candidates in (in_scope, on_owner):
            catchers = [t for t in candidates if t.task_spec.catches(t, event)]
            for task in catchers:
                task.task_spec.catch(task, event)
                update(task)
            if catchers:
                return True
        scope = owner.workflow if owner is not None else None
    top.bpmn_events.append(event)  # uncaught: the engine reads these with workflow.get_events()
    return False


def _event_subprocess_task(my_task):
    workflow = my_task.workflow
    if workflow.parent_task_id is None:
        return None
    owner = workflow.top_workflow.get_task_from_id(workflow.parent_task_id)
    return owner if isinstance(owner.task_spec, EventSubprocess) else None


def _scope_of_event_subprocess_start(task):
    if not isinstance(task.task_spec, StartEventMixin):
        return None
    owner = _event_subprocess_task(task)
    return owner.workflow if owner is not None else None


def _attached_activity(task):
    if not isinstance(task.task_spec, BoundaryEvent):
        return None
    return next((c for c in task.parent.children if not isinstance(c.task_spec, BoundaryEvent)), None)
