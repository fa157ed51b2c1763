"""What an advance produced: status, variables, what the instance waits for, when its next timer is due.

Read off a workflow after the engine steps; the runner writes it in the save transaction.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from SpiffWorkflow.bpmn.specs.event_definitions.conditional import ConditionalEventDefinition
from SpiffWorkflow.bpmn.specs.event_definitions.item_aware_event import SignalEventDefinition
from SpiffWorkflow.bpmn.specs.event_definitions.message import MessageEventDefinition
from SpiffWorkflow.bpmn.specs.event_definitions.timer import TimerEventDefinition
from SpiffWorkflow.bpmn.specs.mixins.events.end_event import EndEvent
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState

from bpmn import all_task_specs, answer, awaited_correlation, is_external_task, spiff_internals
from engine.store import pruning, workflows
from engine.store.db import iso

WAITING_STATES = TaskState.READY | TaskState.WAITING | TaskState.STARTED


@dataclass
class Outcome:
    status: str
    state: str
    variables: dict[str, Any]
    waiting_for: list[dict[str, Any]] = field(default_factory=list)
    output_keys: list[str] | None = None
    error: dict[str, Any] | None = None
    next_timer_at: datetime | None = None  # naive UTC, like every timestamp in the database
    workflow: BpmnWorkflow | None = None
    dispatch: list[dict[str, Any]] = field(default_factory=list)  # operator tasks to hand to jobs
    thrown: list[dict[str, Any]] = field(default_factory=list)    # messages and signals for other instances
    steps: list[list[Any]] = field(default_factory=list)          # path rows of what was pruned (store.pruning)


def summarize(workflow: BpmnWorkflow, error: dict[str, Any] | None) -> Outcome:
    steps = pruning.prune(workflow)  # what nothing reads again goes before the save (kept: all that waits)
    state = workflows.dump_workflow(workflow)
    outcome = _summarize(workflow, state, error)
    outcome.steps = steps
    return outcome


def _summarize(workflow: BpmnWorkflow, state: str, error: dict[str, Any] | None) -> Outcome:
    if error is not None:
        return Outcome("failed", state, current_variables(workflow), error=error, workflow=workflow)
    if workflow.is_completed():
        if not workflow.success:
            return Outcome("failed", state, dict(workflow.data), workflow=workflow,
                           error={"message": "The process ended unsuccessfully.", "element_id": None})
        return Outcome("completed", state, dict(workflow.data), output_keys=_output_keys(workflow),
                       workflow=workflow)
    waiting, next_timer_at = _waiting(workflow)
    return Outcome("running", state, current_variables(workflow), waiting_for=waiting,
                   next_timer_at=next_timer_at, workflow=workflow)


def _waiting(workflow: BpmnWorkflow) -> tuple[list[dict[str, Any]], datetime | None]:
    waiting: list[dict[str, Any]] = []
    due_times: list[datetime] = []
    for task in workflow.get_tasks(state=WAITING_STATES):
        spec = task.task_spec
        if not spec.bpmn_id or not spec.manual and task.state == TaskState.READY:
            continue  # engine tasks about to run are not "waiting"; hidden specs have no bpmn id
        entry: dict[str, Any] = {"element_id": spec.bpmn_id, "kind": kind_of(spec)}
        if task.state == TaskState.WAITING:
            messages, signals, due = _events_awaited(task)
            for word, names in (("message", messages), ("signal", signals)):
                if names:
                    entry[word] = names[0]
                    if len(names) > 1:
                        entry[f"{word}s"] = names
            correlation = awaited_correlation(task) if messages else {}
            if correlation:
                entry["correlation"] = correlation
            if due is not None:
                entry["due_at"] = iso(due)
                due_times.append(due)
            definition = getattr(spec, "event_definition", None)
            if isinstance(definition, ConditionalEventDefinition):
                entry["condition"] = definition.expression
        elif is_external_task(spec):  # a worker's: the element it is and the topic workers fetch
            entry["kind"] = spec.extensions["external"].get("element", "serviceTask")
            entry["topic"] = spec.extensions["external"]["topic"]
        operator = spec.extensions.get("operator") if spec.manual else None
        if operator:
            entry["operator"] = operator
        waiting.append(entry)
    return waiting, min(due_times, default=None)


def _events_awaited(task) -> tuple[list[str], list[str], datetime | None]:
    """Message names, signal names and timer due time a waiting task is waiting for (an event-based
    gateway waits for several: its definition is a MultipleEventDefinition, its timer value in
    internal data)."""
    definition = getattr(task.task_spec, "event_definition", None)
    if definition is None:
        return [], [], None
    parts = getattr(definition, "event_definitions", None) or [definition]
    if getattr(definition, "parallel", False):  # a parallel multiple event waits for what it has not had yet
        seen = [event.event_definition for event in task.internal_data.get("seen_events", [])]
        parts = [part for part in parts if part not in seen]
    messages = [d.name for d in parts if isinstance(d, MessageEventDefinition)]
    signals = [d.name for d in parts if isinstance(d, SignalEventDefinition)]
    has_timer = any(isinstance(d, TimerEventDefinition) for d in parts)
    return messages, signals, timer_due_at(task) if has_timer else None


def timer_due_at(task) -> datetime | None:
    """A waiting timer's due time (naive UTC), from the value SpiffWorkflow stored for it."""
    value = spiff_internals.event_value(task)
    if isinstance(value, dict):  # a cycle that has not started yet
        value = value.get("next")
    if not value:
        return None
    try:
        due = TimerEventDefinition.get_datetime(value) if isinstance(value, str) else value
    except (ValueError, TypeError):
        return None
    if due.tzinfo is not None:
        due = due.astimezone(timezone.utc).replace(tzinfo=None)
    return due


def current_variables(workflow: BpmnWorkflow) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for task in workflow.get_tasks(state=WAITING_STATES | TaskState.ERROR):
        merged.update(task.data)
    if not merged and workflow.last_task is not None:
        merged.update(workflow.last_task.data)
    return merged


def _end_events_output_keys(spec, subprocess_specs: dict) -> dict[int, list[str]]:
    """id of each end event spec that names ``output_keys`` -> the keys it names."""
    named = {}
    for task_spec in all_task_specs(spec, subprocess_specs):
        raw = task_spec.extensions.get("properties", {}).get("output_keys") if isinstance(task_spec, EndEvent) else None
        keys = [k.strip() for k in raw.split(",") if k.strip()] if raw else []
        if keys:
            named[id(task_spec)] = keys
    return named


def _output_keys(workflow: BpmnWorkflow) -> list[str] | None:
    """The keys named by the completed end events of a completed workflow's own tree (a completed
    subprocess's end events answer to their subprocess, as SpiffWorkflow's task iterator has it)."""
    named = answer(_end_events_output_keys, workflow.spec, workflow.subprocess_specs)
    if not named:
        return None  # no end event names any (a walk of the task tree otherwise)
    keys: list[str] = []
    for task in workflow.tasks.values():
        if id(task.task_spec) in named and task.state == TaskState.COMPLETED:
            keys.extend(named[id(task.task_spec)])
    return list(dict.fromkeys(keys)) or None


# Engine classes whose name is not the BPMN element's: callers know the diagram, not SpiffWorkflow.
_BPMN_KINDS = {"operatorTask": "serviceTask", "noneTask": "task", "subWorkflowTask": "subProcess",
               "eventSubprocess": "subProcess", "interruptingStartEvent": "startEvent",
               "eventSubprocessStart": "startEvent", "transactionSubprocess": "transaction",
               "mappedScriptTask": "scriptTask"}


def kind_of(task_spec) -> str:
    """The BPMN element kind of a spec, e.g. ``userTask`` from ``UserTask``, ``serviceTask`` from
    ``OperatorTask``; loop structure keeps the engine's words (``parallelInstances`` ...)."""
    name = type(task_spec).__name__
    kind = name[:1].lower() + name[1:]
    return _BPMN_KINDS.get(kind, kind)
