"""Running the engine steps of one advance under Baton's guardrails, and what came of it.

SpiffWorkflow walks the task tree recursively and silently stops past ~1000 levels (a loop of
~500 turns ends "completed" with empty data), and its cost per step grows with the tree: an
advance is stopped, loudly, past a number of steps, a tree depth or a time well inside the job's
lease. A failure keeps the workflow as far as it got; the instance fails with a message naming
the element.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from SpiffWorkflow.bpmn.specs.event_definitions.item_aware_event import ErrorEventDefinition
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.exceptions import SpiffWorkflowException

from bpmn import refresh_conditions, thrown_events
from engine import json_values
from engine.chat import ai_dialogs
from engine.chat.outbox import Outbox
from engine.errors import ExternalTaskError, GuardrailError, OperatorError, ScriptError
from engine.outbound.http_tasks import operator_tasks_to_dispatch
from engine.runtime.outcome import Outcome, summarize
from engine.sandbox import script_error_of

MAX_TREE_DEPTH = 800
MAX_STEPS_PER_ADVANCE = 20_000
MAX_ADVANCE_SECONDS = 15.0


class _Guard:
    """Called by SpiffWorkflow before each task completes: raises GuardrailError past a limit."""

    def __init__(self) -> None:
        self.steps = 0
        self.deadline = time.monotonic() + MAX_ADVANCE_SECONDS

    def __call__(self, task) -> None:
        self.steps += 1
        if time.monotonic() > self.deadline:
            raise GuardrailError(f"The instance ran for more than {MAX_ADVANCE_SECONDS:.0f} s without "
                                 "waiting (a loop that never ends, or one too large?) and was stopped.",
                                 data={"task": task})
        if self.steps > MAX_STEPS_PER_ADVANCE:
            raise GuardrailError(f"The instance ran more than {MAX_STEPS_PER_ADVANCE} steps at once "
                                 "(a loop that never waits?) and was stopped.", data={"task": task})
        if task.depth > MAX_TREE_DEPTH:
            raise GuardrailError(f"The instance's path grew longer than {MAX_TREE_DEPTH} steps "
                                 "(a loop that never ends?) and was stopped.", data={"task": task})


def run(loaded: BpmnWorkflow | None, apply: Callable[[], BpmnWorkflow], outbox: Outbox | None) -> Outcome:
    """Apply the event and step, sending what send_message tasks say and stepping again after them."""
    error, workflow, guard = None, loaded, _Guard()
    try:
        workflow = apply()
        workflow.refresh_timers()
        workflow.do_engine_steps(will_complete_task=guard)
        while refresh_conditions(workflow) or (outbox is not None and outbox.run_ready(workflow)):
            workflow.do_engine_steps(will_complete_task=guard)
        if outbox is not None and outbox.has_ai_steps:
            outbox.dialogs = ai_dialogs.ready_dialogs(workflow, outbox.conversation, outbox.sandbox)
    except GuardrailError as exc:
        task = exc.data.pop("task")
        error = {"message": exc.message, "element_id": task.task_spec.bpmn_id}
    except (OperatorError, ExternalTaskError) as exc:
        error = {"message": exc.message, "element_id": exc.data.get("element_id")}
    except (SpiffWorkflowException, ScriptError) as exc:
        error = describe_failure(exc)
    if workflow is None:  # the very first step failed: nothing to save yet, let the worker retry
        raise RuntimeError(f"could not start the workflow: {error}")
    # What the instance threw for others (kept however the advance ended: a throw that happened
    # before a failure happened), and a BPMN error nothing caught.
    events = workflow.get_events()
    error = error or _uncaught_error(events)
    dispatch = operator_tasks_to_dispatch(workflow) if error is None else []
    outcome = _summarize_readable(workflow, error)
    if outcome.error is not None and error is None:
        dispatch = []
    outcome.dispatch = dispatch
    outcome.thrown = thrown_events(events)
    return outcome


def _summarize_readable(workflow: BpmnWorkflow, error: dict[str, Any] | None) -> Outcome:
    """``summarize``, unless the variables hold a value that could not be read back (a number that
    overflowed, text with a lone surrogate, nesting past the limit: ``engine.json_values``), made by
    a script, a model, an HTTP answer ...: then the instance fails naming where the value is, and
    every task's copy of it is replaced by a marker, so the failed instance still reads and saves."""
    try:
        outcome = summarize(workflow, error)
        found = json_values.problem(outcome.variables, "variables")
    except RecursionError:  # nested too deep even to serialize
        found = json_values.JsonValueError("variables", f"nested deeper than {json_values.MAX_DEPTH} levels")
    if found is None:
        return outcome
    last = workflow.last_task
    element_id = last.task_spec.bpmn_id if last is not None else None
    for task in workflow.get_tasks():
        task.data = json_values.readable(task.data)
    workflow.data = json_values.readable(workflow.data)
    message = (f"The value at {found.where} cannot be stored: {found.problem}. It was replaced by a "
               "marker and the instance was stopped.")
    return summarize(workflow, error or {"message": message, "element_id": element_id})


def _uncaught_error(events: list) -> dict[str, Any] | None:
    """A BPMN error that no boundary or event subprocess caught fails the instance (as an incident
    would in Camunda) instead of letting the flow continue as if nothing happened."""
    for event in events:
        if isinstance(event.event_definition, ErrorEventDefinition):
            name = event.event_definition.code or event.event_definition.name
            return {"message": f"The BPMN error '{name}' was thrown and nothing caught it.", "element_id": None}
    return None


def describe_failure(exc: Exception) -> dict[str, Any]:
    """``{message, element_id}`` for a failed instance: our sandbox's words when it was the cause."""
    task = getattr(exc, "task", None)
    spec = getattr(task, "task_spec", None) or getattr(exc, "task_spec", None)
    element_id = getattr(spec, "bpmn_id", None)
    if str(exc).startswith("No conditions satisfied"):
        return {"message": f"No outgoing flow of gateway '{element_id}' has a true condition, and it has "
                           "no default flow.", "element_id": element_id}
    cause = script_error_of(exc)
    if cause is not None:
        message = cause.message
    else:
        message = getattr(exc, "message", None) or str(exc).splitlines()[0]
    return {"message": message, "element_id": element_id}
