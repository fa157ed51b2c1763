"""What Baton adds to SpiffWorkflow 3.2's events, and the calls the engine uses to deliver them.

Spec classes, each registered with the serializer (``bpmn.serializer``):

* ``MessageDefinition``: a message carries variables. SpiffWorkflow's own definition drops the
  payload unless the model names a ``spiffworkflow:messageVariable``; Baton's merges a dict payload
  into the catching task's data, so ``process.message {variables}`` reaches the process however
  the message is caught (catch event, receive task, boundary event, event subprocess start,
  event-based gateway). Thrown (end and throw events, send tasks), it carries the thrower's variables.
* ``ErrorDefinition`` and ``EscalationDefinition``: thrown with the thrower's variables, and only
  to the scopes around the thrower (SpiffWorkflow's spiff classes throw no data unless the model
  has a payload expression, and to every waiting catcher of the instance), so the path that
  handles an error sees what the failed subprocess had computed.
  (Where they go is ``bpmn.scopes``, with the event subprocess classes.)

``message_event`` builds the event the engine hands to ``workflow.send_event``; ``start_at``
makes a fresh workflow begin at one chosen start event.
"""
from __future__ import annotations

from copy import deepcopy
from typing import Any

from SpiffWorkflow.bpmn.specs.mixins.events.start_event import StartEvent as StartEventMixin
from SpiffWorkflow.bpmn.util.event import BpmnEvent
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.spiff.specs.event_definitions import (
    ErrorEventDefinition, EscalationEventDefinition, MessageEventDefinition)
from SpiffWorkflow.util.task import TaskState

from bpmn.scopes import deliver_in_scope
from engine.errors import BatonError


class MessageDefinition(MessageEventDefinition):
    """A message event whose payload (a dict of variables) is merged into the catching task's data.

    Correlation is not used: ``process.message`` names one instance, so the parser builds these
    without correlation properties even when the model declares correlation keys.
    """

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
        my_task.workflow.top_workflow.catch(BpmnEvent(self, payload=payload))


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


def message_event(name: str, variables: dict[str, Any] | None = None) -> BpmnEvent:
    """The event ``workflow.send_event`` needs to deliver message ``name`` with ``variables``.

    It matches every way Baton's specs catch a message of that name (SpiffWorkflow compares the
    definition's class and name): catch events, receive tasks, boundary events, the start events
    of message event subprocesses and the catch events behind an event-based gateway (where the
    waiting task is the gateway). ``send_event`` raises WorkflowException when nothing catches it.
    """
    return BpmnEvent(MessageDefinition(name), payload=dict(variables or {}))


def start_at(workflow: BpmnWorkflow, element_id: str) -> None:
    """Make a workflow that has not run yet begin at start event ``element_id``.

    With several start events SpiffWorkflow would begin at the first one of the file; this runs
    its start bookkeeping and cancels the other start events. Call before ``do_engine_steps``.
    """
    ready = workflow.get_tasks(state=TaskState.READY)
    if len(ready) != 1 or ready[0].task_spec.name != "Start":
        raise BatonError("start_at needs a workflow that has not run yet.")
    # The top-level start events: those of subprocesses live in their own specs.
    starts = {spec.bpmn_id for spec in workflow.spec.task_specs.values() if isinstance(spec, StartEventMixin)}
    if element_id not in starts:
        raise BatonError(f"'{element_id}' is not a start event of this process.")
    if len(starts) == 1:
        return
    ready[0].run()
    [split] = [task for task in workflow.get_tasks(state=TaskState.READY)
               if task.task_spec.name == "StartEventSplit"]
    split.run()
    for task in split.children:
        if task.task_spec.bpmn_id != element_id:
            task.cancel()

