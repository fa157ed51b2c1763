"""The private parts of SpiffWorkflow 3.2 that Baton relies on, in one place.

A task's links and stored event value, the re-evaluation of a task, the serializer's encoder mode
and the layout of a serialized workflow are not SpiffWorkflow's public API, and Baton's converter
of spec-less states copies two of its methods. Every use goes through this module;
tests/unit/bpmn/test_spiff_internals.py holds each to what Baton assumes (and pins the source of
what is copied), so an upgrade that changes one fails there, naming it, instead of an instance
failing somewhere deep. Task specs that override SpiffWorkflow's ``_*_hook`` methods are held by
the same test (each overridden name must still exist on the SpiffWorkflow base).
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Any, Iterator
from uuid import UUID

from SpiffWorkflow.bpmn.serializer.default.workflow import BpmnWorkflowConverter, WorkflowConverter
from SpiffWorkflow import task as spiff_task
from SpiffWorkflow.bpmn.specs.control import _EndJoin
from SpiffWorkflow.util.task import TaskState

# The join that ends a (sub)process: every token must reach it (bpmn.scopes.ScopeEndJoin).
EndJoin = _EndJoin


# --- a task's links, as ids: no lookup in the workflow's task map ----------------------------------

def parent_id(task) -> UUID | None:
    return task._parent


def child_ids(task) -> list[UUID]:
    return task._children


def set_parent_id(task, parent: UUID | None) -> None:
    task._parent = parent


def set_child_ids(task, children: list[UUID]) -> None:
    task._children = children


# --- what SpiffWorkflow keeps in a task's internal data -------------------------------------------

EVENT_VALUE = "event_value"  # a timer's due time, duration or cycle, as its event definition keeps it


def event_value(task) -> Any:
    return task.internal_data.get(EVENT_VALUE)


def set_event_value(task, value: Any) -> None:
    task.internal_data[EVENT_VALUE] = value


def end_cycle(task) -> None:
    """A cycle timer with no cycle left: its value goes and its event counts as fired, as
    SpiffWorkflow's ``CycleTimerEventDefinition.cycle_complete`` leaves it (bpmn.cron copies it)."""
    task.internal_data.pop(EVENT_VALUE, None)
    task.internal_data["event_fired"] = True


# --- stepping ---------------------------------------------------------------------------------------

def update(task) -> None:
    """Let the task's spec react to a change (an event caught): what SpiffWorkflow runs for a task
    when its predecessor completes; a caught boundary or start event becomes ready."""
    task.task_spec._update(task)


def inherit_data(task) -> None:
    """Merge the parent's data into the task's, as SpiffWorkflow does when the task becomes ready."""
    task._inherit_data()


# --- serializing ------------------------------------------------------------------------------------

@contextmanager
def encoder_mode(registry) -> Iterator[None]:
    """``registry.convert`` as ``serialize_json`` runs it: data values stay Python objects (a JSON
    encoder's ``default`` converts them at the end) instead of being copied into dicts first."""
    registry._encoder_mode = True
    try:
        yield
    finally:
        registry._encoder_mode = False


# The keys of a serialized (sub)workflow and task that hold process data (values of any type the
# registry knows); every other key is SpiffWorkflow's own bookkeeping of str, int, float, bool,
# None and lists of str. The top workflow alone has "subprocesses" and "bpmn_events".
WORKFLOW_DATA_KEYS = ("data", "correlations")
TASK_DATA_KEYS = ("internal_data", "data", "delta")
WORKFLOW_KEYS = {"data", "correlations", "last_task", "success", "completed", "tasks", "root"}
SUBPROCESS_KEYS = WORKFLOW_KEYS | {"parent_task_id", "spec"}
TASK_KEYS = {"id", "parent", "children", "last_state_change", "state", "task_spec", "triggered",
             "internal_data", "data", "delta"}


def data_slots(state: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """Where a serialized workflow (``SpeclessWorkflowConverter.to_dict``'s dict) holds process
    data, as (dict, key): the workflow's and each subprocess's data and correlations, each task's
    data, data delta and internal data, and the events the workflow threw. The dicts are the
    converters' own, made for this serialization; the values may be the workflow's."""
    yield state, "bpmn_events"
    for workflow in (state, *state["subprocesses"].values()):
        for key in WORKFLOW_DATA_KEYS:
            yield workflow, key
        for task in workflow["tasks"].values():
            for key in TASK_DATA_KEYS:
                yield task, key


class SpeclessWorkflowConverter(BpmnWorkflowConverter):
    """The top workflow without ``spec``/``subprocess_specs``; they are handed back on restore.
    Both methods are SpiffWorkflow's own (``BpmnWorkflowConverter``), changed as they say."""

    def to_dict(self, workflow):
        # Minus the two spec entries (converting them is the cost).
        dct = WorkflowConverter.to_dict(self, workflow)
        dct["subprocesses"] = self.mapping_to_dict(workflow.subprocesses)
        dct["bpmn_events"] = self.registry.convert(workflow.bpmn_events)
        return dct

    def from_dict(self, dct, spec=None, subprocess_specs=None, script_engine=None):
        # With the cached spec objects handed in, and the workflow built around the caller's
        # script engine: the parent builds it without one, and BpmnWorkflow then makes
        # SpiffWorkflow's default engine (eval/exec with full builtins). The caller checks both.
        workflow = self.target_class(spec, subprocess_specs or {}, script_engine=script_engine, deserializing=True)
        workflow.tasks = self.mapping_from_dict(dct["tasks"], UUID, workflow=workflow)
        workflow.task_tree = workflow.tasks.get(UUID(dct["root"]))
        self.set_default_attributes(workflow, dct)
        self.subprocesses_from_dict(dct["subprocesses"], workflow)
        workflow.bpmn_events = self.registry.restore(dct.get("bpmn_events", []))
        return workflow


# --- a task's state changes, logged only when the log is written ------------------------------------

_SPIFF_SET_STATE = spiff_task.Task._set_state


def _set_state(self, value: int) -> None:
    """SpiffWorkflow's ``Task._set_state``, copied, building the log record (its text and its extras:
    names looked up, the parent's id, a dict per call) only when ``spiff.task`` writes it. The
    original builds them on every state change whatever the level (about 16 changes per instance
    of a four-element process, 6-8 % of an advance's CPU); the state and its time are kept the same."""
    if value != self._state:
        now = time.time()
        elapsed = now - self.last_state_change
        self.last_state_change = now
        self._state = value
        if _TASK_LOG.isEnabledFor(logging.INFO):
            _TASK_LOG.info(f'State changed to {TaskState.get_name(value)}',
                           extra=self.collect_log_extras({'elapsed': elapsed}))
    elif _TASK_LOG.isEnabledFor(logging.DEBUG):
        _TASK_LOG.debug(f'State set to {TaskState.get_name(value)}', extra=self.collect_log_extras())


_TASK_LOG = spiff_task.logger


def log_state_changes_only_when_written() -> None:
    """Install ``_set_state`` on SpiffWorkflow's ``Task`` (``create_app`` does, once per process)."""
    spiff_task.Task._set_state = _set_state


def state_changes_log_as_spiffworkflow_does() -> None:
    """Put SpiffWorkflow's own ``_set_state`` back (tests compare the two)."""
    spiff_task.Task._set_state = _SPIFF_SET_STATE


# --- moving a workflow onto another version of its spec (bpmn.migration) ----------------------------

PREDICTED = TaskState.PREDICTED_MASK | TaskState.FUTURE  # what prediction made and may make again


def can_repredict(task) -> bool:
    """A task whose children are all predicted, or added by the task itself (``triggered``: the
    instances of a multi-instance task, a caught event's path): predicting it again changes none
    of them. (A boundary split's children are the task and its events, which wait: it is not.)"""
    return all(child.triggered or child.has_state(PREDICTED) for child in task.children)


def repredict(task) -> None:
    """Predict again, from the task's (new) spec, the branch below a task that waits or runs,
    keeping the task itself: its id, state, data and internal data (a timer's due time, an AI
    dialog's turn). SpiffWorkflow's ``migrate_workflow`` resets such a task instead
    (``Task.reset_branch``: internal data cleared, a new due time, a task opened again); this is its
    prediction half alone: the predicted children (not those the task added itself) go with their
    branches, and ``TaskSpec._predict`` runs on the task as on a definite task (FUTURE) before its
    state is put back, without a state change logged. Only for a task that ``can_repredict``."""
    state = task.state
    for child in [c for c in task.children if not c.triggered and c.has_state(PREDICTED)]:
        task.workflow._remove_task(child.id)  # with its own predicted branch
    task._state = TaskState.FUTURE
    task.task_spec._predict(task, mask=TaskState.PREDICTED_MASK | TaskState.FUTURE)
    task._state = state


def compare_specs(diff, spec, candidate) -> list[str]:
    """What differs between two aligned task specs, as ``SpecDiff`` records it for the specs its
    own walk reached (``SpecDiff._compare_task_specs``: the changed keys of their serialized forms,
    or ``["typename"]`` when their classes differ)."""
    return diff._compare_task_specs(spec, candidate)
