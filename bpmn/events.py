"""What Baton adds to SpiffWorkflow 3.2's events, and the calls the engine uses to deliver them.

Spec classes, each registered with the serializer (``bpmn.serializer``):

* ``MessageDefinition``: a message carries variables. SpiffWorkflow's own definition drops the
  payload unless the model names a ``spiffworkflow:messageVariable``; Baton's merges a dict payload
  into the catching task's data, so ``process.message {variables}`` reaches the process however
  the message is caught (catch event, receive task, boundary event, event subprocess start,
  event-based gateway). Thrown (end and throw events, send tasks), it carries the thrower's variables.
  Its correlation values (the element's ``extensions['correlation']``, expressions over the
  payload, ``bpmn.correlations``) travel with it and are kept in ``workflow.correlations``.
* ``SignalDefinition``: a signal by name, carrying the thrower's variables like a message; thrown,
  it reaches the catchers of its own instance and is always handed to the engine too, which
  broadcasts it to the tenant's other instances.
* ``ErrorDefinition`` and ``EscalationDefinition``: thrown with the thrower's variables, and only
  to the scopes around the thrower (SpiffWorkflow's spiff classes throw no data unless the model
  has a payload expression, and to every waiting catcher of the instance), so the path that
  handles an error sees what the failed subprocess had computed.
  (Where they go is ``bpmn.scopes``, with the event subprocess classes.)
* ``ConditionDefinition``: a conditional boundary or catch event fires once its condition (Python,
  translated at deploy from JUEL or FEEL) is true. SpiffWorkflow checks a condition only when the
  event starts waiting; ``refresh_conditions`` checks the waiting ones again after each step, as
  Camunda does when variables change. A condition naming a variable the instance does not have
  (yet) is not true, rather than an error.
* ``MultipleDefinition``: a start event with several event definitions ("multiple", or "parallel
  multiple" when each must occur) merges the variables of every event it caught.

``message_event`` and ``signal_event`` build the events the engine hands to ``workflow.send_event``;
``thrown_events`` reads what an instance threw for other instances; ``start_at`` makes a fresh
workflow begin at one chosen start event.
"""
from __future__ import annotations

import ast
import functools
from copy import deepcopy
from typing import Any

from SpiffWorkflow.bpmn.specs.event_definitions.conditional import ConditionalEventDefinition
from SpiffWorkflow.bpmn.specs.event_definitions.multiple import MultipleEventDefinition
from SpiffWorkflow.bpmn.specs.mixins.events.intermediate_event import BoundaryEvent
from SpiffWorkflow.bpmn.specs.mixins.events.start_event import StartEvent as StartEventMixin
from SpiffWorkflow.bpmn.util.event import BpmnEvent
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.spiff.specs.event_definitions import (
    ErrorEventDefinition, EscalationEventDefinition, MessageEventDefinition, SignalEventDefinition)
from SpiffWorkflow.util.task import TaskState

from bpmn.scopes import deliver_in_scope
from bpmn.spiff_internals import update
from engine.errors import BatonError


class MessageDefinition(MessageEventDefinition):
    """A message event whose payload (a dict of variables) is merged into the catching task's data.

    SpiffWorkflow's correlation properties stay empty (so its own matching, made for pools inside
    one workflow, never refuses a message): the engine matches messages to instances, with the
    values ``correlation_values`` computes and ``workflow.correlations`` keeps.
    """

    def catch(self, my_task, event=None):
        super().catch(my_task, event)
        if event is not None:
            values = {**(event.correlations or {}), **correlation_values(my_task, event.payload)}
            my_task.workflow.top_workflow.correlations.update(values)

    def update_task_data(self, my_task):
        if self.message_var is not None:  # SpiffArena's spiffworkflow:messageVariable
            super().update_task_data(my_task)
            return
        payload = my_task.internal_data.pop(self.name, None)
        if isinstance(payload, dict):
            my_task.set_data(**payload)

    def throw(self, my_task):
        """A message end/throw event or send task: the thrower's variables travel with it (SpiffArena's
        messagePayload expression, when given, instead). A catcher in the same instance gets it;
        otherwise SpiffWorkflow keeps it for the engine, which reads ``workflow.get_events()``."""
        if self.expression is not None:
            payload = my_task.workflow.script_engine.evaluate(my_task, self.expression)
        else:
            payload = deepcopy(my_task.data)
        values = correlation_values(my_task, payload)
        top = my_task.workflow.top_workflow
        top.correlations.update(values)
        event = BpmnEvent(self, payload=payload, correlations=values)
        event.thrower = _thrower(my_task)
        top.catch(event)


class SignalDefinition(SignalEventDefinition):
    """A signal whose payload (the thrower's variables) is merged into the catching task's data;
    thrown, it goes to the catchers of this instance and, always, to the engine's broadcast."""

    def throw(self, my_task):
        payload = deepcopy(my_task.data)
        event = BpmnEvent(self, payload=payload)
        event.thrower = _thrower(my_task)
        top = my_task.workflow.top_workflow
        top.event_manager.catch(event, internal=False)
        top.bpmn_events.append(event)

    def update_task_data(self, my_task):
        payload = my_task.internal_data.pop(self.name, None)
        if isinstance(payload, dict):
            my_task.set_data(**payload)


def _thrower(my_task) -> dict[str, Any]:
    """Where an event was thrown, for the engine's delivery (and its error, if undeliverable)."""
    properties = my_task.task_spec.extensions.get("properties", {})
    return {"element_id": my_task.task_spec.bpmn_id,
            "undelivered": (properties.get("undelivered") or "fail").strip()}


def awaited_correlation(my_task) -> dict[str, Any]:
    """The correlation values a waiting element expects of its message: for each property it
    declares, the instance's value from its earlier messages (``workflow.correlations``), else
    the property's expression over the element's own variables."""
    expressions = my_task.task_spec.extensions.get("correlation") or {}
    if not expressions:
        return {}
    known = my_task.workflow.top_workflow.correlations
    computed = correlation_values(my_task, my_task.data)
    return {prop: known[prop] if prop in known else computed[prop]
            for prop in expressions if prop in known or prop in computed}


def correlation_values(my_task, payload: Any) -> dict[str, Any]:
    """The values of the correlation properties the element declares for its message
    (``extensions['correlation']``: {property: expression over the payload}); a property whose
    expression cannot be evaluated over this payload is left out."""
    expressions = my_task.task_spec.extensions.get("correlation") or {}
    if not expressions or not isinstance(payload, dict):
        return {}
    values = {}
    for prop, expression in expressions.items():
        try:
            values[prop] = my_task.workflow.script_engine.environment.evaluate(expression, payload)
        except Exception:  # noqa: BLE001 - a value the payload lacks simply does not correlate
            continue
    return values


class _CarriesVariables:
    """Error and escalation: the thrower's variables travel with the event to its catcher."""

    def throw(self, my_task):
        if self.expression is not None:  # SpiffArena's payload expression
            payload = my_task.workflow.script_engine.evaluate(my_task, self.expression)
        else:
            payload = deepcopy(my_task.data)
        deliver_in_scope(my_task, BpmnEvent(self, payload=payload))

    def update_task_data(self, my_task):
        if self.variable is not None:  # SpiffArena's variableName
            super().update_task_data(my_task)
            return
        payload = my_task.internal_data.pop(self.name, None)
        if isinstance(payload, dict):
            my_task.set_data(**payload)


class ErrorDefinition(_CarriesVariables, ErrorEventDefinition):
    pass


class EscalationDefinition(_CarriesVariables, EscalationEventDefinition):
    pass


class ConditionDefinition(ConditionalEventDefinition):
    """A conditional event: fires once its condition holds over the instance's current variables
    (a boundary event's: its activity's, inside a subprocess too), which its path then carries;
    not before every variable the condition names exists."""

    def has_fired(self, my_task):
        my_task.data.update(_live_variables(my_task))
        if not all(name in my_task.data for name in variables_named(self.expression)):
            return False
        return super().has_fired(my_task)


_LIVE = TaskState.READY | TaskState.WAITING | TaskState.STARTED


def _live_variables(my_task) -> dict[str, Any]:
    """A waiting boundary event's copy of the variables is the one its activity started with: the
    activity's own, and the tasks under way in its subprocess, are what the variables are now."""
    if not isinstance(my_task.task_spec, BoundaryEvent) or my_task.parent is None:
        return {}
    found: dict[str, Any] = {}
    for sibling in my_task.parent.children:
        if sibling is my_task or isinstance(sibling.task_spec, BoundaryEvent):
            continue
        found.update(sibling.data)
        subprocess = my_task.workflow.top_workflow.get_subprocess(sibling)
        for task in subprocess.get_tasks(state=_LIVE) if subprocess is not None else ():
            found.update(task.data)
    return found


@functools.lru_cache(maxsize=1024)
def variables_named(expression: str) -> frozenset[str]:
    """The variables a Python expression reads: its names, but for the functions it calls."""
    tree = ast.parse(expression, mode="eval")
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    return frozenset(node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id not in called)


def refresh_conditions(workflow: BpmnWorkflow) -> bool:
    """Check the conditions of the waiting conditional events again; True when one fired (the
    caller steps again)."""
    fired = False
    for task in list(workflow.event_manager.tasks.values()):
        if isinstance(task.task_spec.event_definition, ConditionDefinition) and task.state == TaskState.WAITING:
            update(task)
            fired = fired or task.state != TaskState.WAITING
    return fired


class MultipleDefinition(MultipleEventDefinition):
    """Several event definitions on one start event: the variables of each event caught are merged."""

    def update_task_data(self, my_task):
        for event in my_task.internal_data.get("seen_events", []):
            if isinstance(event.payload, dict):
                my_task.set_data(**event.payload)


def message_event(name: str, variables: dict[str, Any] | None = None,
                  correlation: dict[str, Any] | None = None) -> BpmnEvent:
    """The event ``workflow.send_event`` needs to deliver message ``name`` with ``variables``.

    It matches every way Baton's specs catch a message of that name (SpiffWorkflow compares the
    definition's class and name): catch events, receive tasks, boundary events, the start events
    of message event subprocesses and the catch events behind an event-based gateway (where the
    waiting task is the gateway). ``send_event`` raises WorkflowException when nothing catches it.
    """
    return BpmnEvent(MessageDefinition(name), payload=dict(variables or {}), correlations=dict(correlation or {}))


def signal_event(name: str, variables: dict[str, Any] | None = None) -> BpmnEvent:
    """The event ``workflow.send_event`` needs to deliver signal ``name`` with ``variables``."""
    return BpmnEvent(SignalDefinition(name), payload=dict(variables or {}))


def thrown_events(events: list[BpmnEvent]) -> list[dict[str, Any]]:
    """The messages and signals among ``workflow.get_events()``, for the engine to deliver:
    ``{kind, name, variables, correlation, element_id, undelivered}``."""
    found = []
    for event in events:
        kind = {MessageDefinition: "message", SignalDefinition: "signal"}.get(type(event.event_definition))
        if kind is None:
            continue
        thrower = getattr(event, "thrower", None) or {"element_id": None, "undelivered": "fail"}
        payload = event.payload if isinstance(event.payload, dict) else {}
        found.append({"kind": kind, "name": event.event_definition.name, "variables": payload,
                      "correlation": dict(event.correlations or {}), **thrower})
    return found


def start_at(workflow: BpmnWorkflow, element_id: str) -> None:
    """Make a workflow that has not run yet begin at start event ``element_id``.

    With several start events SpiffWorkflow would begin at the first one of the file; this runs
    its start bookkeeping and cancels the other start events. Call before ``do_engine_steps``.
    """
    # The top-level start events: those of subprocesses live in their own specs.
    starts = {spec.bpmn_id for spec in workflow.spec.task_specs.values() if isinstance(spec, StartEventMixin)}
    if element_id not in starts:
        raise BatonError(f"'{element_id}' is not a start event of this process.")
    if len(starts) == 1:
        return  # nothing to choose (and no walk of the tree: this runs at every start)
    ready = workflow.get_tasks(state=TaskState.READY)
    if len(ready) != 1 or ready[0].task_spec.name != "Start":
        raise BatonError("start_at needs a workflow that has not run yet.")
    ready[0].run()
    [split] = [task for task in workflow.get_tasks(state=TaskState.READY)
               if task.task_spec.name == "StartEventSplit"]
    split.run()
    for task in split.children:
        if task.task_spec.bpmn_id != element_id:
            task.cancel()

