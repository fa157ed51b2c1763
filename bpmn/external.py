"""External tasks: service (and send) tasks that no Baton operator runs wait for a worker.

Camunda's pattern: the task has a *topic*; workers fetch and lock tasks of their topics, do the
work, and complete them (or report a failure or a BPMN error). The topic is read, in this order,
from ``camunda:topic`` (with ``camunda:type="external"``), the text of ``camunda:class``,
``camunda:delegateExpression`` or ``camunda:expression`` (a Java delegate becomes a worker's
topic), Zeebe's ``zeebe:taskDefinition type``, else the element id. A message end or throw event
whose message definition names such an implementation is an external task too, as Camunda runs it:
the worker does the sending, Baton throws nothing by name for it.

``ExternalTask`` is SpiffWorkflow 3.2's plain service task behaviour made explicit: running it does
nothing, so ``do_engine_steps`` leaves it STARTED until the application completes it. The topic is
in ``task_spec.extensions['external']`` (plain data). The functions below are the seam the engine's
fetch-and-lock uses: find the parked tasks, complete one with variables, throw a BPMN error at it.
"""
from __future__ import annotations

from typing import Any

from lxml import etree
from SpiffWorkflow.spiff.specs.defaults import ServiceTask
from SpiffWorkflow.util.task import TaskState

from bpmn.io_mapping import IoMapping
from bpmn.profile import CAMUNDA_NS, NSMAP, ZEEBE_NS
from engine.errors import BatonError

_IMPLEMENTATIONS = ("class", "delegateExpression", "expression")


class ExternalTask(IoMapping, ServiceTask):
    """A task a worker completes: it parks STARTED (SpiffWorkflow: ``run()`` returned None)."""

    def _execute(self, task):
        return None


def topic_of(node: etree._Element) -> dict[str, str]:
    """``{"topic", "source", "element"}`` of a service, send or business rule task that names no
    operator (``element``: its BPMN kind, which ``waiting_for`` shows)."""
    return {**_topic(node), "element": etree.QName(node).localname}


def message_implementation(node: etree._Element) -> etree._Element | None:
    """The message definition of a message end or throw event that names a Camunda implementation
    (``camunda:class``, ``delegateExpression``, ``expression``, ``type="external"``), else None."""
    if etree.QName(node).localname not in ("endEvent", "intermediateThrowEvent"):
        return None
    definition = node.find(f"./{{{NSMAP['bpmn']}}}messageEventDefinition")
    if definition is None or not any(definition.get(f"{{{CAMUNDA_NS}}}{attribute}")
                                     for attribute in (*_IMPLEMENTATIONS, "type")):
        return None
    return definition


def event_topic_of(node: etree._Element) -> dict[str, str]:
    """``topic_of`` a message end or throw event run as an external task (``message_implementation``)."""
    return {**_topic(message_implementation(node)), "element": etree.QName(node).localname}


def _topic(node: etree._Element) -> dict[str, str]:
    if node.get(f"{{{CAMUNDA_NS}}}type") == "external":
        return {"topic": (node.get(f"{{{CAMUNDA_NS}}}topic") or "").strip(), "source": "camunda:topic"}
    for attribute in _IMPLEMENTATIONS:
        text = (node.get(f"{{{CAMUNDA_NS}}}{attribute}") or "").strip()
        if text:
            return {"topic": text, "source": f"camunda:{attribute}"}
    definition = node.find(f"./{{{NSMAP['bpmn']}}}extensionElements/{{{ZEEBE_NS}}}taskDefinition")
    if definition is not None and (definition.get("type") or "").strip():
        return {"topic": definition.get("type").strip(), "source": "zeebe:taskDefinition"}
    return {"topic": node.get("id") or "", "source": "id"}


def waiting_external_tasks(workflow) -> list[dict[str, Any]]:
    """The external tasks of a workflow that wait for a worker:
    ``{spiff_task_id, element_id, topic, variables}`` (the variables the task sees)."""
    found = []
    for task in workflow.get_tasks(state=TaskState.STARTED):
        if isinstance(task.task_spec, ExternalTask):
            found.append({"spiff_task_id": str(task.id), "element_id": task.task_spec.bpmn_id,
                          "topic": task.task_spec.extensions["external"]["topic"], "variables": dict(task.data)})
    return found


def is_external_task(task_spec) -> bool:
    return isinstance(task_spec, ExternalTask)


def complete_external_task(task, variables: dict[str, Any]) -> None:
    """A worker's result: its variables go into the task's data and the task completes.
    The caller runs ``workflow.do_engine_steps()`` afterwards."""
    _require_waiting(task)
    task.data.update(variables)
    task.complete()


def throw_bpmn_error(task, error_code: str, message: str | None = None,
                     variables: dict[str, Any] | None = None) -> bool:
    """A worker's BPMN error: delivered to the error boundary events of the task that catch
    ``error_code`` (the boundary interrupts the task). Returns False when none catches it, in which
    case nothing changed and the caller fails the instance at the task."""
    from bpmn.task_throws import ERROR, throw_at_task  # events imports scopes, not us

    _require_waiting(task)
    return throw_at_task(task, ERROR, error_code, message, variables)


def _require_waiting(task) -> None:
    if not isinstance(task.task_spec, ExternalTask) or task.state != TaskState.STARTED:
        raise BatonError("The task is not an external task waiting for a worker.")
