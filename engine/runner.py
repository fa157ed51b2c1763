"""Advancing instances: the only caller of SpiffWorkflow's stepping functions.

``Runner.advance`` handles one job of an instance: load the state (short read), apply the job's
event and run the engine steps with no transaction open, then save the new state and delete the
job in ONE transaction, guarded by the instance's revision (compare-and-swap). A save that finds
another revision is dropped and the job goes back to the queue, so an instance is never advanced
by two workers at once, even when a lease ran out under a slow worker.
"""
from __future__ import annotations

import logging
from uuid import UUID
from dataclasses import dataclass, field
from typing import Any, Callable

from SpiffWorkflow.bpmn.specs.mixins.events.end_event import EndEvent
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.exceptions import SpiffWorkflowException, TaskNotFoundException
from SpiffWorkflow.util.task import TaskState
from sqlalchemy import select, update

from engine import jobs, store, tasks
from engine.db import db, utcnow
from engine.errors import ScriptError
from engine.models import Instance
from engine.sandbox import script_error_of

log = logging.getLogger("baton.runner")

START = "start"
# Spiff walks the task tree recursively; past this depth it silently stops (see ARCHITECTURE.md).
MAX_TREE_DEPTH = 900


@dataclass
class Outcome:
    """What an advance produced, ready to be written."""

    status: str
    state: str
    variables: dict[str, Any]
    waiting_for: list[dict[str, str]] = field(default_factory=list)
    output_keys: list[str] | None = None
    error: dict[str, Any] | None = None


class Runner:
    def __init__(self, script_engine, spec_cache: store.SpecCache):
        self.script_engine = script_engine
        self.specs = spec_cache
        self._events: dict[str, Callable[[BpmnWorkflow | None, dict], BpmnWorkflow | None]] = {
            START: self._apply_start,
            tasks.COMPLETE_TASK: self._apply_task_completion,
        }

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._events)

    def advance(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        row = db.session.execute(
            select(Instance.tenant_id, Instance.status, Instance.revision, Instance.state, Instance.definition_id)
            .where(Instance.id == job.instance_id)).one_or_none()
        if row is None or row.status != "running":
            self._drop(job, worker_id)
            return
        specs = self.specs.get(row.definition_id)
        db.session.rollback()  # no transaction (nor SQLite write lock) while the engine runs

        workflow = store.restore_workflow(row.state, specs, self.script_engine) if row.state else None
        workflow = self._events[job.kind](workflow, {**job.payload, "_specs": specs})
        outcome = self._run(workflow)

        saved = db.session.execute(
            update(Instance)
            .where(Instance.id == job.instance_id, Instance.revision == row.revision)
            .values(status=outcome.status, state=outcome.state, variables=outcome.variables,
                    waiting_for=outcome.waiting_for, output_keys=outcome.output_keys,
                    error=outcome.error, revision=row.revision + 1,
                    completed_at=utcnow() if outcome.status != "running" else None))
        if saved.rowcount != 1 or not jobs.finish(job, worker_id):
            log.info("instance %s changed under job %s; trying again", job.instance_id, job.id)
            jobs.release(job, worker_id)
            return
        tasks.sync(row.tenant_id, job.instance_id, row.definition_id,
                   workflow if outcome.status == "running" else None)
        db.session.commit()

    def give_up(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        """A job kept failing for a reason that is ours, not the process's: fail the instance."""
        db.session.execute(
            update(Instance).where(Instance.id == job.instance_id, Instance.status == "running")
            .values(status="failed", completed_at=utcnow(), revision=Instance.revision + 1,
                    error={"message": "An internal error stopped this instance; it can be retried.",
                           "element_id": None}))
        jobs.finish(job, worker_id)
        db.session.commit()

    def _drop(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        """The instance ended (or was cancelled) before this job ran: the job has nothing to do."""
        jobs.finish(job, worker_id)
        db.session.commit()

    def _apply_start(self, workflow: BpmnWorkflow | None, payload: dict) -> BpmnWorkflow:
        if workflow is not None:  # already started: a replayed start job changes nothing
            return workflow
        workflow = store.new_workflow(payload["_specs"], self.script_engine)
        start = workflow.get_tasks(state=TaskState.READY)[0]
        start.data.update(payload.get("variables") or {})
        return workflow

    def _apply_task_completion(self, workflow: BpmnWorkflow | None, payload: dict) -> BpmnWorkflow | None:
        """Finish the human task with its result; a task that is no longer ready is left alone."""
        try:
            task = workflow.get_task_from_id(UUID(payload["spiff_task_id"])) if workflow else None
        except TaskNotFoundException:
            task = None
        if task is not None and task.state == TaskState.READY and tasks.is_human(task.task_spec):
            task.data.update(payload.get("result") or {})
            task.run()
        return workflow

    def _run(self, workflow: BpmnWorkflow) -> Outcome:
        error = None
        try:
            workflow.do_engine_steps()
        except (SpiffWorkflowException, ScriptError) as exc:
            error = describe_failure(exc)
        if error is None:
            error = _check_depth(workflow)
        return summarize(workflow, error)


def describe_failure(exc: Exception) -> dict[str, Any]:
    """``{message, element_id}`` for a failed instance: our sandbox's words when it was the cause."""
    task = getattr(exc, "task", None)
    element_id = getattr(getattr(task, "task_spec", None), "bpmn_id", None)
    cause = script_error_of(exc)
    if cause is not None:
        message = cause.message
    else:
        message = getattr(exc, "message", None) or str(exc).splitlines()[0]
    return {"message": message, "element_id": element_id}


def _check_depth(workflow: BpmnWorkflow) -> dict[str, Any] | None:
    depth, node = 0, workflow.last_task
    while node is not None:
        depth, node = depth + 1, node.parent
    if depth > MAX_TREE_DEPTH:
        element = workflow.last_task.task_spec.bpmn_id if workflow.last_task else None
        return {"message": f"The instance took more than {MAX_TREE_DEPTH} steps in one path "
                           "(a loop that never ends?) and was stopped.", "element_id": element}
    return None


def summarize(workflow: BpmnWorkflow, error: dict[str, Any] | None) -> Outcome:
    state = store.dump_workflow(workflow)
    if error is not None:
        return Outcome("failed", state, _current_variables(workflow), error=error)
    if workflow.is_completed():
        if not workflow.success:
            return Outcome("failed", state, dict(workflow.data),
                           error={"message": "The process ended unsuccessfully.", "element_id": None})
        return Outcome("completed", state, dict(workflow.data), output_keys=_output_keys(workflow))
    waiting = [{"element_id": t.task_spec.bpmn_id, "kind": _kind(t.task_spec)}
               for t in workflow.get_tasks(state=TaskState.READY | TaskState.WAITING | TaskState.STARTED)
               if t.task_spec.bpmn_id]
    return Outcome("running", state, _current_variables(workflow), waiting_for=waiting)


def _current_variables(workflow: BpmnWorkflow) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for task in workflow.get_tasks(state=TaskState.READY | TaskState.WAITING | TaskState.STARTED | TaskState.ERROR):
        merged.update(task.data)
    if not merged and workflow.last_task is not None:
        merged.update(workflow.last_task.data)
    return merged


def _output_keys(workflow: BpmnWorkflow) -> list[str] | None:
    keys: list[str] = []
    for task in workflow.get_tasks(state=TaskState.COMPLETED):
        if isinstance(task.task_spec, EndEvent):
            raw = task.task_spec.extensions.get("properties", {}).get("output_keys")
            if raw:
                keys.extend(k.strip() for k in raw.split(",") if k.strip())
    return list(dict.fromkeys(keys)) or None


def _kind(task_spec) -> str:
    """The BPMN element kind of a spec, e.g. ``userTask`` from ``UserTask``."""
    name = type(task_spec).__name__
    return name[:1].lower() + name[1:]
