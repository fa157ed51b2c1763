"""What each instance job does to a workflow before the engine steps: the events the runner applies.

Each function takes the restored workflow (None before the first save) and the job's payload,
and returns the workflow to step. A job whose moment has passed (its task is no longer ready,
nothing waits for its message) changes nothing: the runner saves and finishes it all the same.
"""
from __future__ import annotations

import logging
from typing import Any, Callable
from uuid import UUID

from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.exceptions import TaskNotFoundException, WorkflowException
from SpiffWorkflow.util.task import TaskState

from bpmn import (complete_external_task, is_external_task, message_event, signal_event, start_at, throw_at_task,
                  throw_bpmn_error)
from engine.chat.ai_dialogs import is_ai_chat
from engine.errors import ExternalTaskError, OperatorError
from engine.jobs import kinds
from engine.outbound.http_tasks import DISPATCHED, FAILED
from engine.runtime import repairs
from engine.runtime.human_task_rows import is_human
from engine.store import workflows

log = logging.getLogger("baton.runner")

Event = Callable[[BpmnWorkflow | None, dict[str, Any]], BpmnWorkflow]


class Events:
    """The event of every instance job kind; ``payload`` also carries the advance's ``_specs``,
    the instance's stored ``_variables`` and the ``_script_engine`` of its tenant."""

    def __init__(self, script_engine):
        self.script_engine = script_engine
        self.by_kind: dict[str, Event] = {
            kinds.START: self.start, kinds.TIMER: _nothing, kinds.MESSAGE: _message, kinds.RETRY: self.retry,
            kinds.COMPLETE_TASK: _task_completion, kinds.OPERATOR_RESULT: _operator_result,
            kinds.CHAT_MESSAGE: _chat_message, kinds.AI_RESULT: _ai_result,
            kinds.EXTERNAL_RESULT: _external_result, kinds.SIGNAL: _signal, kinds.REPAIR: repairs.apply,
        }

    def apply(self, kind: str, workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow:
        return self.by_kind[kind](workflow, payload)

    def start(self, workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow:
        """A new workflow, begun at the start event its trigger names (``start_event``; none: the
        only one); a message or signal that started it (``trigger``) is delivered to that event."""
        if workflow is not None:  # already started: a replayed start job changes nothing
            return workflow
        workflow = workflows.new_workflow(payload["_specs"], payload.get("_script_engine") or self.script_engine)
        workflow.get_next_task(state=TaskState.READY).data.update(payload.get("variables") or {})
        if payload.get("start_event"):
            start_at(workflow, payload["start_event"])
        trigger = payload.get("trigger")
        if trigger:
            workflow.do_engine_steps()  # to the start event, which waits for its message or signal
            workflow.send_event(event_of(trigger))
        return workflow

    def retry(self, workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow:
        """Resume a failed instance at the element that failed, with ``variables`` merged in."""
        variables = payload.get("variables") or {}
        if workflow is None:  # it failed before its first save: start again
            return self.start(None, {**payload, "variables": {**payload["_variables"], **variables}})
        for task in workflow.get_tasks(state=TaskState.ERROR):
            workflow.reset_from_task_id(task.id, data={**task.data, **variables})
        for task in workflow.get_tasks(state=TaskState.READY):
            task.data.update(variables)
            if task.internal_data.pop(FAILED, None) is not None:
                task.internal_data.pop(DISPATCHED, None)  # call again
        return workflow


def _nothing(workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow:
    """A timer job: refreshing timers and stepping (done for every event) is all it takes."""
    return workflow


def _task_completion(workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow | None:
    """Finish the human task with its result, or throw its BPMN error or escalation to its boundary
    events (``engine.task_throws``); a task that is no longer ready is left alone."""
    task = find_task(workflow, payload["spiff_task_id"])
    if task is None or task.state != TaskState.READY or not is_human(task.task_spec):
        return workflow
    thrown = payload.get("throw")
    if thrown is None:
        task.data.update(payload.get("result") or {})
        task.run()
    elif not throw_at_task(task, thrown["kind"], thrown["code"], thrown.get("message"), thrown.get("variables")):
        # Checked when it was thrown: only a task whose spec changed since could get here.
        element_id = task.task_spec.bpmn_id
        raise ExternalTaskError(f"The BPMN {thrown['kind']} '{thrown['code']}' thrown at task '{element_id}' found no "
                                "boundary event to catch it.", data={"element_id": element_id})
    return workflow


def event_of(trigger: dict[str, Any]):
    """The BPMN event of a delivered message or signal (``{kind, name, variables, correlation}``)."""
    if trigger["kind"] == "signal":
        return signal_event(trigger["name"], trigger.get("variables"))
    return message_event(trigger["name"], trigger.get("variables"), trigger.get("correlation"))


def _message(workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow | None:
    """Deliver a named message, with its variables (and correlation values), to whatever waits for it."""
    try:
        workflow.send_event(message_event(payload["message"], payload.get("variables") or {},
                                          payload.get("correlation")))
    except WorkflowException:  # it stopped waiting between process.message and now
        log.warning("message %r arrived when nothing waited for it any more", payload["message"])
    return workflow


def _signal(workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow | None:
    """A broadcast signal: to whatever waits for it; nothing waiting any more is no error (a signal
    reaches whoever listens when it is broadcast)."""
    try:
        workflow.send_event(signal_event(payload["signal"], payload.get("variables") or {}))
    except WorkflowException:
        log.info("signal %r arrived when nothing waited for it any more", payload["signal"])
    return workflow


def _chat_message(workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow | None:
    """A customer's message: to a waiting AI chat step first (its dialog answers it: the save opens
    the turn); else to a waiting catch event or receive task named ``chat_message`` (its variables
    merged in); else the message stays only stored in the conversation."""
    if any(is_ai_chat(task.task_spec) for task in workflow.get_tasks(state=TaskState.READY)):
        return workflow
    try:
        workflow.send_event(message_event(kinds.CHAT_MESSAGE, payload.get("variables") or {}))
    except WorkflowException:
        pass
    return workflow


def _ai_result(workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow | None:
    """The AI chat step ended (handoff, keyword, max_turns, error): its variables, then on."""
    task = find_task(workflow, payload["spiff_task_id"])
    if task is not None and task.state == TaskState.READY and is_ai_chat(task.task_spec):
        task.data.update(payload.get("variables") or {})
        task.run()
    return workflow


def _operator_result(workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow | None:
    """An HTTP task's answer: its result goes into the task's data, or the instance fails."""
    task = find_task(workflow, payload["spiff_task_id"])
    if task is None or task.state != TaskState.READY:
        return workflow
    if not payload["ok"]:
        task.internal_data[FAILED] = payload.get("status") or True
        raise OperatorError(payload["message"], data={"element_id": task.task_spec.bpmn_id})
    variable = task.task_spec.extensions.get("properties", {}).get("result_variable")
    if variable:
        task.data[variable] = payload.get("result")
    task.internal_data.pop(DISPATCHED, None)
    task.run()
    return workflow


def _external_result(workflow: BpmnWorkflow | None, payload: dict[str, Any]) -> BpmnWorkflow | None:
    """What a worker reported for an external task: its variables and on; a BPMN error to the
    task's error boundary event (none catching it fails the instance there); a failure with no
    retries left fails the instance there. A task that no longer waits is left alone."""
    task = find_task(workflow, payload["spiff_task_id"])
    if task is None or task.state != TaskState.STARTED or not is_external_task(task.task_spec):
        return workflow
    element_id = task.task_spec.bpmn_id
    if payload["outcome"] == "complete":
        complete_external_task(task, payload.get("variables") or {})
    elif payload["outcome"] == "bpmn_error":
        code, message = payload["error_code"], payload.get("message")
        if not throw_bpmn_error(task, code, message, payload.get("variables")):
            said = f": {message}" if message else "."
            raise ExternalTaskError(f"The worker reported the BPMN error '{code}' at '{element_id}', and no error "
                                    f"boundary event of the task catches it{said}", data={"element_id": element_id})
    else:
        raise ExternalTaskError(f"The external task '{element_id}' (topic '{payload.get('topic')}') failed with no "
                                f"retries left: {payload.get('message')}", data={"element_id": element_id})
    return workflow


def find_task(workflow: BpmnWorkflow | None, spiff_task_id: str):
    """The task of that id, or None (no workflow yet, or the task is gone from the tree)."""
    if workflow is None:
        return None
    try:
        return workflow.get_task_from_id(UUID(spiff_task_id))
    except (TaskNotFoundException, ValueError):
        return None
