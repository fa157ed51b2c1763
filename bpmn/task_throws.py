"""BPMN errors and escalations thrown at a waiting task from outside the flow: an external task's
worker (``external.bpmn_error``), a person or a CRM at a user task (``task.bpmn_error``,
``task.bpmn_escalation``, Camunda's ``handleBpmnError`` / ``handleEscalation``). They go to the
boundary events attached to that task that catch the code (or catch any code).

``boundary_catchers`` answers from the specs alone, before anything is queued (the caller refuses a
throw nothing would catch); ``throw_at_task`` delivers it to a restored workflow.
"""
from __future__ import annotations

from typing import Any

from SpiffWorkflow.bpmn.specs.control import BoundaryEventSplit
from SpiffWorkflow.bpmn.specs.mixins.events.intermediate_event import BoundaryEvent
from SpiffWorkflow.bpmn.util.event import BpmnEvent

from bpmn.events import ErrorDefinition, EscalationDefinition
from bpmn.spiff_internals import update

ERROR, ESCALATION = "error", "escalation"
_DEFINITIONS = {ERROR: ErrorDefinition, ESCALATION: EscalationDefinition}


def boundary_catchers(task_specs, element_id: str, kind: str, code: str) -> list:
    """The boundary event specs attached to task ``element_id`` (among ``task_specs``) that catch a
    ``kind`` (error or escalation) with ``code``."""
    wanted = _DEFINITIONS[kind]
    found = []
    for spec in task_specs:
        if isinstance(spec, BoundaryEventSplit) and any(getattr(o, "bpmn_id", None) == element_id for o in spec.outputs):
            found += [o for o in spec.outputs if isinstance(o, BoundaryEvent)
                      and isinstance(o.event_definition, wanted)
                      and o.event_definition.code in (None, code)]
    return found


def throw_at_task(task, kind: str, code: str, message: str | None = None,
                  variables: dict[str, Any] | None = None) -> bool:
    """Deliver the error or escalation ``code`` to the boundary events of ``task`` that catch it,
    with the task's variables and ``variables`` (``errorMessage``: ``message``); an interrupting one
    cancels the task. False when none catches it: nothing changed (the caller fails the instance)."""
    payload = {**task.data, **(variables or {})}
    if message is not None:
        payload.setdefault("errorMessage", message)
    event = BpmnEvent(_DEFINITIONS[kind](code, code=code), payload=payload)
    catchers = [t for t in task.workflow.top_workflow.event_manager.tasks.values()
                if t.parent is task.parent and t is not task and t.task_spec.catches(t, event)]
    for catcher in catchers:
        catcher.task_spec.catch(catcher, event)
        update(catcher)
    return bool(catchers)
