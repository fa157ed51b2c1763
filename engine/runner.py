"""Advancing instances: the only caller of SpiffWorkflow's stepping functions.

``Runner.advance`` handles one job of an instance: load the state (short read), apply the job's
event and run the engine steps with no transaction open, then save the new state, the side
tables and the follow-up jobs (the next timer) and delete the job in ONE transaction, guarded by
the instance's revision (compare-and-swap). A save that finds another revision is dropped and the
job goes back to the queue, so an instance is never advanced by two workers at once.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any, Callable
from uuid import UUID

from SpiffWorkflow.bpmn.specs.event_definitions.item_aware_event import ErrorEventDefinition
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.exceptions import SpiffWorkflowException, TaskNotFoundException, WorkflowException
from SpiffWorkflow.util.task import TaskState
from sqlalchemy import bindparam, delete, select, update

from bpmn import all_task_specs, message_event
from engine import ai_chat, chat_operators, jobs, operators, store, tasks
from engine.db import DriverStatement, db, sqlite_write, utcnow
from engine.errors import CallActivityError, OperatorError, ScriptError
from engine.models import Instance, Job
from engine.outcome import Outcome, summarize
from engine.sandbox import script_error_of

log = logging.getLogger("baton.runner")

START, TIMER, MESSAGE, RETRY = "start", "timer", "message", "retry"
# SpiffWorkflow walks the task tree recursively and silently stops past ~1000 levels (a loop of
# ~500 turns ends "completed" with empty data). Stop well before, loudly.
MAX_TREE_DEPTH = 800
MAX_STEPS_PER_ADVANCE = 20_000
# Spiff's cost per step grows with the task tree, so a huge loop slows down before the step cap:
# an advance is also stopped after this long, well inside the job lease (30 s by default).
MAX_ADVANCE_SECONDS = 15.0


# The statements of every advance, built once and run on the tables: building them and going
# through the ORM cost more CPU than the database spends running them.
_instances, _jobs = Instance.__table__, Job.__table__
_LOAD = (select(_instances.c.tenant_id, _instances.c.status, _instances.c.revision, _instances.c.state,
                _instances.c.definition_id, _instances.c.variables, _instances.c.called_definitions,
                _instances.c.waiting_for)
         .where(_instances.c.id == bindparam("id")))
_SAVE = (update(_instances)
         .where(_instances.c.id == bindparam("instance_id"), _instances.c.revision == bindparam("loaded_revision"))
         .values({column: bindparam(f"new_{column}") for column in (
             "status", "state", "variables", "waiting_for", "output_keys", "error", "revision",
             "called_definitions", "completed_at")}))
_DROP_TIMERS = delete(_jobs).where(_jobs.c.instance_id == bindparam("instance_id"), _jobs.c.kind == TIMER,
                                   _jobs.c.id != bindparam("job_id"))


_SAVE_DRIVER = DriverStatement(_SAVE)
_FINISH_DRIVER = DriverStatement(jobs._finish_returning_next)


class _Lost(Exception):
    """The instance's revision or the job's lease changed under a plain save: roll it back."""


def _has_human_tasks(specs: tuple) -> bool:
    """Whether task rows can exist at all (else the sync's query is skipped)."""
    return any(tasks.is_human(ts) for ts in all_task_specs(*specs))


def _timer_work(row, outcome: Outcome) -> tuple[bool, bool]:
    """What an advance's save does to timer jobs: drop the old one (only an instance that was
    waiting on a timer can have one) and schedule the next (a running instance waiting on one)."""
    return (any("due_at" in entry for entry in row.waiting_for or []),
            outcome.status == "running" and outcome.next_timer_at is not None)


class GuardrailError(ScriptError):
    """The instance grew past a safety limit and was stopped."""

    reason = "guardrail"


class Runner:
    def __init__(self, script_engine, spec_cache: store.SpecCache):
        self.script_engine = script_engine
        self.specs = spec_cache
        self._events: dict[str, Callable[[BpmnWorkflow | None, dict], BpmnWorkflow]] = {
            START: self._apply_start,
            tasks.COMPLETE_TASK: self._apply_task_completion,
            TIMER: self._apply_nothing,
            MESSAGE: self._apply_message,
            RETRY: self._apply_retry,
            operators.OPERATOR_RESULT: self._apply_operator_result,
            chat_operators.CHAT_MESSAGE: self._apply_chat_message,
            ai_chat.AI_RESULT: self._apply_ai_result,
        }

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._events)

    def advance(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        # The row the claim read (no read transaction of its own), else a fresh read.
        row = job.instance_row or self._load(job)
        if row is None or row.status != "running":
            self._drop(job, worker_id)
            return
        try:
            specs, pinned = self.specs.resolve(row.tenant_id, row.definition_id, row.called_definitions)
        except CallActivityError as exc:
            self._fail_unchanged(job, worker_id, row, exc.message)
            return
        outbox = chat_operators.Outbox.for_instance(job.instance_id, specs, self.script_engine.sandbox)
        if outbox is not None and job.instance_row is not None:
            # A talking process reads its conversation and its row in one transaction.
            row = self._load(job)
            if row is None or row.status != "running":
                self._drop(job, worker_id)
                return
        db.session.rollback()  # no transaction (nor SQLite write lock) while the engine runs

        workflow = store.restore_workflow(row.state, specs, self.script_engine) if row.state else None
        payload = {**job.payload, "_specs": specs, "_variables": row.variables or {}}
        outcome = self._run(workflow, lambda: self._events[job.kind](workflow, payload), outbox)
        if outbox is None and self._saves_plainly(job, row, outcome, specs):
            self._save_plain(job, worker_id, row, outcome, pinned)
            return
        if not self._save(job, worker_id, row, outcome, pinned):
            return
        if outbox is not None and outbox.has_ai_steps:  # dialog rows before the conversation's (lock order)
            ai_chat.sync(row.tenant_id, job.instance_id, outbox.conversation and outbox.conversation.id,
                         outbox.dialogs if outcome.status == "running" else {}, process_spoke=bool(outbox.texts))
        chat_operators.settle(job.instance_id, outcome.status, outbox, specs)
        if _has_human_tasks(specs):
            tasks.sync(row.tenant_id, job.instance_id, row.definition_id,
                       outcome.workflow if outcome.status == "running" else None)
        self._schedule_timer(job, row, outcome)
        for work in outcome.dispatch:
            jobs.enqueue(job.tenant_id, operators.OPERATOR, payload={"instance_id": job.instance_id, **work})
        db.session.commit()

    def _load(self, job: jobs.ClaimedJob):
        return db.session.connection().execute(_LOAD, {"id": job.instance_id}).one_or_none()

    @staticmethod
    def _save_params(job: jobs.ClaimedJob, row, outcome: Outcome, pinned: dict) -> dict:
        return {
            "instance_id": job.instance_id, "loaded_revision": row.revision, "new_status": outcome.status,
            "new_state": outcome.state, "new_variables": outcome.variables,
            "new_waiting_for": outcome.waiting_for, "new_output_keys": outcome.output_keys,
            "new_error": outcome.error, "new_revision": row.revision + 1,
            "new_called_definitions": pinned or None,
            "new_completed_at": utcnow() if outcome.status != "running" else None}

    def _save(self, job: jobs.ClaimedJob, worker_id: str, row, outcome: Outcome, pinned: dict) -> bool:
        saved = db.session.connection().execute(_SAVE, self._save_params(job, row, outcome, pinned))
        if saved.rowcount != 1 or not jobs.finish(job, worker_id):
            log.info("instance %s changed under job %s; trying again", job.instance_id, job.id)
            jobs.release(job, worker_id)
            return False
        return True

    @staticmethod
    def _saves_plainly(job: jobs.ClaimedJob, row, outcome: Outcome, specs: tuple) -> bool:
        """Whether this advance's save is only the instance update and the job's deletion (no task
        rows, conversation, timer or operator job to write), on SQLite: ``_save_plain`` does it on
        the driver connection."""
        connection_dialect = db.engine.dialect
        drops_timers, schedules_timer = _timer_work(row, outcome)
        return (connection_dialect.name == "sqlite" and connection_dialect.delete_returning
                and job.instance_id is not None and not db.session().in_transaction()
                and not outcome.dispatch and not drops_timers and not schedules_timer
                and not _has_human_tasks(specs)
                and not chat_operators.settle_writes(outcome.status, None, specs))

    def _save_plain(self, job: jobs.ClaimedJob, worker_id: str, row, outcome: Outcome, pinned: dict) -> None:
        """``_save`` + commit for a plain advance (``_saves_plainly``): the same two statements in one
        transaction, the revision compare-and-swap and the lease check, on the driver connection
        (``db.sqlite_write``) without the ORM session's per-transaction machinery."""
        engine = db.engine
        try:
            with sqlite_write(engine) as connection:
                if _SAVE_DRIVER.count(connection, engine.dialect, self._save_params(job, row, outcome, pinned)) != 1:
                    raise _Lost()
                finished = _FINISH_DRIVER.execute(connection, engine.dialect, {
                    "id": job.id, "worker_id": worker_id, "instance_id": job.instance_id, "now": utcnow(),
                    "job_id": job.id})
                if len(finished) != 1:
                    raise _Lost()
        except _Lost:
            log.info("instance %s changed under job %s; trying again", job.instance_id, job.id)
            jobs.release(job, worker_id)
            return
        next_kind = finished[0][0]
        if next_kind is not None:  # that job was held back only by this one
            jobs.wake_local(Counter({next_kind: 1}))

    def _schedule_timer(self, job: jobs.ClaimedJob, row, outcome: Outcome) -> None:
        """One timer job per instance, due at its earliest waiting timer."""
        drops_timers, schedules_timer = _timer_work(row, outcome)
        if drops_timers:
            db.session.connection().execute(_DROP_TIMERS, {"instance_id": job.instance_id, "job_id": job.id})
        if schedules_timer:
            jobs.enqueue(job.tenant_id, TIMER, instance_id=job.instance_id, run_at=outcome.next_timer_at)

    def give_up(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        """A job kept failing for a reason that is ours, not the process's: fail the instance, and
        keep the job (a task completion, a message ...) for ``process.retry`` to apply again."""
        failed = db.session.execute(
            update(Instance).where(Instance.id == job.instance_id, Instance.status == "running")
            .values(status="failed", completed_at=utcnow(), revision=Instance.revision + 1,
                    error={"message": "An internal error stopped this instance; it can be retried.",
                           "element_id": None}))
        self._keep_for_retry(job, worker_id, failed.rowcount == 1)

    def _fail_unchanged(self, job: jobs.ClaimedJob, worker_id: str, row, message: str) -> None:
        """Fail an instance that cannot even be loaded (its called process is gone); keep its state."""
        failed = db.session.execute(
            update(Instance).where(Instance.id == job.instance_id, Instance.revision == row.revision)
            .values(status="failed", completed_at=utcnow(), revision=row.revision + 1,
                    error={"message": message, "element_id": None}))
        self._keep_for_retry(job, worker_id, failed.rowcount == 1)

    def _keep_for_retry(self, job: jobs.ClaimedJob, worker_id: str, failed_now: bool) -> None:
        if failed_now:
            chat_operators.close_for_instance(job.instance_id)
            jobs.hold(job, worker_id, "held: its instance failed; process.retry queues it again")
        else:  # the instance had already ended (cancelled, say): nothing will retry it
            jobs.finish(job, worker_id)
        db.session.commit()

    def _drop(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        """The instance ended (or was cancelled) before this job ran: the job has nothing to do."""
        jobs.finish(job, worker_id)
        db.session.commit()

    # -- events ------------------------------------------------------------------------------

    def _apply_start(self, workflow: BpmnWorkflow | None, payload: dict) -> BpmnWorkflow:
        if workflow is not None:  # already started: a replayed start job changes nothing
            return workflow
        workflow = store.new_workflow(payload["_specs"], self.script_engine)
        start = workflow.get_next_task(state=TaskState.READY)
        start.data.update(payload.get("variables") or {})
        return workflow

    def _apply_nothing(self, workflow: BpmnWorkflow | None, payload: dict) -> BpmnWorkflow:
        """A timer job: refreshing timers and stepping (done for every event) is all it takes."""
        return workflow

    def _apply_task_completion(self, workflow: BpmnWorkflow | None, payload: dict) -> BpmnWorkflow | None:
        """Finish the human task with its result; a task that is no longer ready is left alone."""
        task = _find_task(workflow, payload["spiff_task_id"])
        if task is not None and task.state == TaskState.READY and tasks.is_human(task.task_spec):
            task.data.update(payload.get("result") or {})
            task.run()
        return workflow

    def _apply_message(self, workflow: BpmnWorkflow | None, payload: dict) -> BpmnWorkflow | None:
        """Deliver a named message, with its variables, to whatever waits for it."""
        try:
            workflow.send_event(message_event(payload["message"], payload.get("variables") or {}))
        except WorkflowException:  # it stopped waiting between process.message and now
            log.warning("message %r arrived when nothing waited for it any more", payload["message"])
        return workflow

    def _apply_chat_message(self, workflow: BpmnWorkflow | None, payload: dict) -> BpmnWorkflow | None:
        """A customer's message: to a waiting AI chat step first (its dialog answers it: ``ai_chat.sync``
        starts the turn in the save transaction); else to a waiting catch event or receive task
        named ``chat_message`` (its variables merged in); else the message stays only stored."""
        if any(ai_chat.is_ai_chat(task.task_spec) for task in workflow.get_tasks(state=TaskState.READY)):
            return workflow
        try:
            workflow.send_event(message_event(chat_operators.CHAT_MESSAGE, payload.get("variables") or {}))
        except WorkflowException:
            pass
        return workflow

    def _apply_ai_result(self, workflow: BpmnWorkflow | None, payload: dict) -> BpmnWorkflow | None:
        """The AI chat step ended (handoff, keyword, max_turns, error): its variables, then on."""
        task = _find_task(workflow, payload["spiff_task_id"])
        if task is not None and task.state == TaskState.READY and ai_chat.is_ai_chat(task.task_spec):
            task.data.update(payload.get("variables") or {})
            task.run()
        return workflow

    def _apply_retry(self, workflow: BpmnWorkflow | None, payload: dict) -> BpmnWorkflow:
        """Resume a failed instance at the element that failed, with ``variables`` merged in."""
        variables = payload.get("variables") or {}
        if workflow is None:  # it failed before its first save: start again
            return self._apply_start(None, {**payload, "variables": {**payload["_variables"], **variables}})
        for task in workflow.get_tasks(state=TaskState.ERROR):
            workflow.reset_from_task_id(task.id, data={**task.data, **variables})
        for task in workflow.get_tasks(state=TaskState.READY):
            task.data.update(variables)
            if task.internal_data.pop(operators.FAILED, None) is not None:
                task.internal_data.pop(operators.DISPATCHED, None)  # call again
        return workflow

    def _apply_operator_result(self, workflow: BpmnWorkflow | None, payload: dict) -> BpmnWorkflow | None:
        """An operator job's answer: its result goes into the task's data, or the instance fails."""
        task = _find_task(workflow, payload["spiff_task_id"])
        if task is None or task.state != TaskState.READY:
            return workflow
        if not payload["ok"]:
            task.internal_data[operators.FAILED] = payload.get("status") or True
            raise OperatorError(payload["message"], data={"element_id": task.task_spec.bpmn_id})
        variable = task.task_spec.extensions.get("properties", {}).get("result_variable")
        if variable:
            task.data[variable] = payload.get("result")
        task.internal_data.pop(operators.DISPATCHED, None)
        task.run()
        return workflow

    # -- running -----------------------------------------------------------------------------

    def _run(self, loaded: BpmnWorkflow | None, apply: Callable[[], BpmnWorkflow],
             outbox: chat_operators.Outbox | None = None) -> Outcome:
        """Apply the event and step (sending what send_message tasks say, stepping again after them);
        a failure keeps the workflow as far as it got."""
        error, workflow = None, loaded
        steps = [0]
        deadline = time.monotonic() + MAX_ADVANCE_SECONDS

        def guard(task):
            steps[0] += 1
            if time.monotonic() > deadline:
                raise GuardrailError(f"The instance ran for more than {MAX_ADVANCE_SECONDS:.0f} s without "
                                     "waiting (a loop that never ends, or one too large?) and was stopped.",
                                     data={"task": task})
            if steps[0] > MAX_STEPS_PER_ADVANCE:
                raise GuardrailError(f"The instance ran more than {MAX_STEPS_PER_ADVANCE} steps at once "
                                     "(a loop that never waits?) and was stopped.", data={"task": task})
            if task.depth > MAX_TREE_DEPTH:
                raise GuardrailError(f"The instance's path grew longer than {MAX_TREE_DEPTH} steps "
                                     "(a loop that never ends?) and was stopped.", data={"task": task})

        try:
            workflow = apply()
            workflow.refresh_timers()
            workflow.do_engine_steps(will_complete_task=guard)
            while outbox is not None and outbox.run_ready(workflow):
                workflow.do_engine_steps(will_complete_task=guard)
            if outbox is not None and outbox.has_ai_steps:
                outbox.dialogs = ai_chat.ready_dialogs(workflow, outbox.conversation, outbox.sandbox)
            error = _uncaught_error(workflow)
        except GuardrailError as exc:
            task = exc.data.pop("task")
            error = {"message": exc.message, "element_id": task.task_spec.bpmn_id}
        except OperatorError as exc:
            error = {"message": exc.message, "element_id": exc.data.get("element_id")}
        except (SpiffWorkflowException, ScriptError) as exc:
            error = describe_failure(exc)
        if workflow is None:  # the very first step failed: nothing to save yet, let the worker retry
            raise RuntimeError(f"could not start the workflow: {error}")
        dispatch = operators.operator_tasks_to_dispatch(workflow) if error is None else []
        outcome = summarize(workflow, error)
        outcome.dispatch = dispatch
        return outcome


def _uncaught_error(workflow: BpmnWorkflow) -> dict[str, Any] | None:
    """A BPMN error that no boundary or event subprocess caught fails the instance (as an incident
    would in Camunda) instead of letting the flow continue as if nothing happened."""
    for event in workflow.get_events():
        if isinstance(event.event_definition, ErrorEventDefinition):
            name = event.event_definition.code or event.event_definition.name
            return {"message": f"The BPMN error '{name}' was thrown and nothing caught it.", "element_id": None}
    return None


def _find_task(workflow: BpmnWorkflow | None, spiff_task_id: str):
    if workflow is None:
        return None
    try:
        return workflow.get_task_from_id(UUID(spiff_task_id))
    except TaskNotFoundException:
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
