"""Advancing instances: the only code that steps SpiffWorkflow (``Runner.advance``).

One advance handles one job of an instance: take the instance's row (read by the claim, or
loaded), apply the job's event and run the engine steps with no transaction open, then save the
new state, the rows that hang off it and the follow-up jobs, and delete the job, in ONE
transaction guarded by the instance's revision (compare-and-swap). A save that finds another
revision, or a job whose lease was lost, is rolled back whole and the job goes back to the
queue, so an instance is never advanced by two workers at once.

A worker that claimed several jobs at once runs them as a batch (``begin_batch``/``end_batch``):
the saves that write only the instance and its job wait for the batch's end and commit together,
each still all or nothing on its own: one write transaction (SQLite's write lock taken once, one
WAL flush on PostgreSQL) for up to ``WorkerPool.CLAIM_BATCH`` advances.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy import bindparam, delete, select, update

from engine import jobs
from engine.chat import ai_dialogs
from engine.chat import outbox as chat_outbox
from engine.errors import CallActivityError
from engine.jobs import kinds
from engine.runtime import external_tasks, human_tasks, stepping, subscriptions
from engine.runtime.events import Events
from engine.runtime.outcome import Outcome
from engine.store import workflows, writes
from engine.store.db import db, utcnow
from engine.store.models import Instance, Job
from engine.telemetry import metrics

log = logging.getLogger("baton.runner")

_instances, _jobs = Instance.__table__, Job.__table__
_LOAD = (select(_instances.c.tenant_id, _instances.c.status, _instances.c.revision, _instances.c.state,
                _instances.c.definition_id, _instances.c.variables, _instances.c.called_definitions,
                _instances.c.waiting_for)
         .where(_instances.c.id == bindparam("id")))
_DROP_TIMERS = delete(_jobs).where(_jobs.c.instance_id == bindparam("instance_id"), _jobs.c.kind == kinds.TIMER,
                                   _jobs.c.id != bindparam("job_id"))


@dataclass
class _Advance:
    """One advance: its job, the row it started from, the specs it ran with, what it produced."""

    job: jobs.ClaimedJob
    worker_id: str
    row: Any
    specs: tuple
    pinned: dict
    outcome: Outcome
    outbox: chat_outbox.Outbox | None


class Runner:
    """Job handler of every instance job kind (``engine.jobs.kinds.INSTANCE_KINDS``)."""

    def __init__(self, script_engine, spec_cache: workflows.SpecCache, *, wakers, public_url: str):
        self.script_engine = script_engine
        self.specs = spec_cache
        self.wakers = wakers
        self.public_url = public_url
        self.events = Events(script_engine)
        # Per worker (thread) in a batch: its advances whose saves wait for ``end_batch``.
        self._batches: dict[str, list[_Advance]] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.events.by_kind)

    def handle(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        started = time.perf_counter()
        self.advance(job, worker_id)
        metrics.ADVANCE_SECONDS.labels(job.kind).observe(time.perf_counter() - started)

    def advance(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        # The row the claim read (no read transaction of its own), else a fresh read.
        row = job.instance_row or self._load(job)
        if row is None or row.status != "running":
            self._drop(job, worker_id, row)
            return
        try:
            specs, pinned = self.specs.resolve(row.tenant_id, row.definition_id, row.called_definitions)
        except CallActivityError as exc:
            self._fail_unchanged(job, worker_id, row, exc.message)
            return
        outbox = chat_outbox.Outbox.for_instance(job.instance_id, specs, self.script_engine.sandbox)
        if outbox is not None and job.instance_row is not None:
            # A talking process reads its conversation and its row in one transaction.
            row = self._load(job)
            if row is None or row.status != "running":
                self._drop(job, worker_id, row)
                return
        db.session.rollback()  # no transaction (nor SQLite write lock) while the engine runs

        workflow = workflows.restore_workflow(row.state, specs, self.script_engine) if row.state else None
        payload = {**job.payload, "_specs": specs, "_variables": row.variables or {}}
        outcome = stepping.run(workflow, lambda: self.events.apply(job.kind, workflow, payload), outbox)
        self._save(_Advance(job, worker_id, row, specs, pinned, outcome, outbox))

    def _load(self, job: jobs.ClaimedJob):
        return db.session.connection().execute(_LOAD, {"id": job.instance_id}).one_or_none()

    # -- saving --------------------------------------------------------------------------------

    def _save(self, advance: _Advance) -> None:
        """The instance and its job, then the rows that hang off it, in one transaction. An advance
        that writes nothing else is a plain save (``_save_plain``), without the ORM session's
        machinery, at once or at the end of its worker's batch; both run the same writes."""
        rows_too = self._rows_to_write(advance)
        if not rows_too:
            batch = self._batches.get(advance.worker_id)
            if batch is not None:
                batch.append(advance)
            else:
                self._after_plain([advance], self._save_plain([advance]))
            return
        try:
            self._save_instance_and_job(writes.SessionExecutor(), advance)
            for write in rows_too:
                write()
            db.session.commit()
        except writes.Lost:
            self._save_lost(advance)
            return
        _report_saved(advance.job.instance_id, advance.row, advance.outcome)

    def _save_plain(self, advances: list[_Advance]) -> list[_Advance]:
        """Plain saves in one short transaction (``writes.short_transaction``), each all or nothing:
        one lost (instance or lease changed) leaves the others saved; returns the lost ones. A
        single save without path rows is one statement on PostgreSQL, in autocommit. Raises if
        the transaction fails: then none is saved."""
        single = len(advances) == 1 and not advances[0].outcome.steps
        lost = []
        with writes.short_transaction(db.engine, self.wakers, single_write=single) as executor:
            for advance in advances:
                try:
                    with executor.all_or_nothing():
                        self._save_instance_and_job(executor, advance)
                except writes.Lost:
                    lost.append(advance)
        return lost

    def _after_plain(self, advances: list[_Advance], lost: list[_Advance]) -> None:
        for advance in advances:
            if any(advance is other for other in lost):
                self._save_lost(advance)
            else:
                _report_saved(advance.job.instance_id, advance.row, advance.outcome)

    @staticmethod
    def _save_lost(advance: _Advance) -> None:
        db.session.rollback()
        log.info("instance %s changed under job %s; trying again", advance.job.instance_id, advance.job.id)
        try:
            jobs.release(advance.job, advance.worker_id)
        except Exception:  # noqa: BLE001 - the others of its batch are saved: go on with them
            db.session.rollback()
            log.exception("could not release job %s; its lease will run out", advance.job.id)

    # -- batches -------------------------------------------------------------------------------

    def begin_batch(self, worker_id: str) -> None:
        """The worker's next jobs are one claimed batch: their plain saves wait for ``end_batch``."""
        self._batches[worker_id] = []

    def end_batch(self, worker_id: str) -> list[tuple[jobs.ClaimedJob, Exception]]:
        """Commit the batch's waiting saves together. Returns the jobs of a commit that failed (none
        of them saved), with the error, for the worker to try them again as any failed job."""
        waiting = self._batches.pop(worker_id, None)
        if not waiting:
            return []
        try:
            lost = self._save_plain(waiting)
        except Exception as exc:  # noqa: BLE001 - every job of the batch is the worker's to retry
            db.session.rollback()
            return [(advance.job, exc) for advance in waiting]
        self._after_plain(waiting, lost)
        return []

    @staticmethod
    def _save_instance_and_job(executor: writes.Executor, advance: _Advance) -> None:
        job, row, outcome = advance.job, advance.row, advance.outcome
        writes.save_advance(executor, job.instance_id, row.revision, {
            "status": outcome.status, "state": outcome.state, "variables": outcome.variables,
            "waiting_for": outcome.waiting_for, "output_keys": outcome.output_keys, "error": outcome.error,
            "revision": row.revision + 1, "called_definitions": advance.pinned or None,
            "completed_at": utcnow() if outcome.status != "running" else None}, job.id, advance.worker_id)
        writes.add_path_steps(executor, row.tenant_id, job.instance_id, outcome.steps)

    def _rows_to_write(self, advance: _Advance) -> list[Callable[[], None]]:
        """The writes of this advance besides the instance and its job, in lock order (dialog rows
        before the conversation's); empty when it has none. Each module decides about its own."""
        job, row, outcome, outbox, specs = advance.job, advance.row, advance.outcome, advance.outbox, advance.specs
        running = outcome.status == "running"
        found: list[Callable[[], None]] = []
        if outbox is not None and outbox.has_ai_steps:
            found.append(lambda: ai_dialogs.sync(
                row.tenant_id, job.instance_id, outbox.conversation and outbox.conversation.id,
                outbox.dialogs if running else {}, process_spoke=bool(outbox.texts)))
        if chat_outbox.settle_writes(outcome.status, outbox, specs):
            found.append(lambda: chat_outbox.settle(job.instance_id, outcome.status, outbox, specs))
        if human_tasks.may_open_tasks(specs):
            found.append(lambda: human_tasks.sync(row.tenant_id, job.instance_id, row.definition_id,
                                                  outcome.workflow if running else None,
                                                  public_url=self.public_url))
        if any("due_at" in entry for entry in row.waiting_for or []):  # it was waiting on a timer
            found.append(lambda: db.session.execute(_DROP_TIMERS, {"instance_id": job.instance_id,
                                                                   "job_id": job.id}))
        if running and outcome.next_timer_at is not None:  # one timer job, due at its earliest timer
            found.append(lambda: jobs.enqueue(job.tenant_id, kinds.TIMER, instance_id=job.instance_id,
                                              run_at=outcome.next_timer_at))
        for work in outcome.dispatch:
            found.append(lambda work=work: jobs.enqueue(job.tenant_id, kinds.OPERATOR,
                                                        payload={"instance_id": job.instance_id, **work}))
        if external_tasks.may_have_external_tasks(specs):
            found.append(lambda: external_tasks.sync(row.tenant_id, job.instance_id, row.definition_id,
                                                     outcome.workflow if running else None))
        waiting_for = outcome.waiting_for if running else []
        if subscriptions.changed(row.waiting_for, waiting_for):
            found.append(lambda: subscriptions.sync(row.tenant_id, job.instance_id, waiting_for))
        if outcome.thrown:  # delivered by a job of their own, committed with the state that threw them
            found.append(lambda: jobs.enqueue(job.tenant_id, kinds.THROWN, payload={
                "instance_id": job.instance_id, "events": outcome.thrown}))
        return found

    # -- failing -------------------------------------------------------------------------------

    def give_up(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        """A job kept failing for a reason that is ours, not the process's: fail the instance, and
        keep the job (a task completion, a message ...) for ``process.retry`` to apply again."""
        if not jobs.lock(job, worker_id):
            self._left(job, worker_id)
            return
        failed = db.session.execute(
            update(Instance).where(Instance.id == job.instance_id, Instance.status == "running")
            .values(status="failed", completed_at=utcnow(), revision=Instance.revision + 1,
                    error={"message": "An internal error stopped this instance; it can be retried.",
                           "element_id": None}))
        self._keep_for_retry(job, worker_id, failed.rowcount == 1)

    def _fail_unchanged(self, job: jobs.ClaimedJob, worker_id: str, row, message: str) -> None:
        """Fail an instance that cannot even be loaded (its called process is gone); keep its state."""
        if not jobs.lock(job, worker_id):
            self._left(job, worker_id)
            return
        failed = db.session.execute(
            update(Instance).where(Instance.id == job.instance_id, Instance.revision == row.revision)
            .values(status="failed", completed_at=utcnow(), revision=row.revision + 1,
                    error={"message": message, "element_id": None}))
        self._keep_for_retry(job, worker_id, failed.rowcount == 1)

    @staticmethod
    def _left(job: jobs.ClaimedJob, worker_id: str) -> None:
        """The job went with its cancelled instance, or to another worker after its lease ran out:
        the instance is not this worker's to fail."""
        db.session.rollback()
        log.info("job %s left worker %s before it could fail its instance", job.id, worker_id)

    def _keep_for_retry(self, job: jobs.ClaimedJob, worker_id: str, failed_now: bool) -> None:
        if failed_now:
            chat_outbox.close_for_instance(job.instance_id)
            jobs.hold(job, worker_id, "held: its instance failed; process.retry queues it again")
            definition_id = db.session.execute(select(Instance.definition_id)
                                               .where(Instance.id == job.instance_id)).scalar_one()
        else:  # the instance had already ended (cancelled, say): nothing will retry it
            jobs.finish(job, worker_id)
        db.session.commit()
        if failed_now:
            metrics.INSTANCES_ENDED.labels(workflows.definition_code(definition_id), "failed").inc()

    def _drop(self, job: jobs.ClaimedJob, worker_id: str, row) -> None:
        """The instance ended (or was cancelled) before this job ran: the job has nothing to do.
        A worker's report for an instance that failed meanwhile is kept for ``process.retry``: its
        external-task row is already completed, so nothing else would ever bring it back."""
        if row is not None and row.status == "failed" and job.kind == kinds.EXTERNAL_RESULT:
            jobs.hold(job, worker_id, "held: its instance failed; process.retry applies it")
        else:
            jobs.finish(job, worker_id)
        db.session.commit()


def _report_saved(instance_id: int, row, outcome: Outcome) -> None:
    """Metrics and log of a saved advance: an instance's first save starts it, a final status ends it."""
    status = outcome.status
    if row.state is None or status != "running":
        code = workflows.definition_code(row.definition_id)
        if row.state is None:
            metrics.INSTANCES_STARTED.labels(code).inc()
        if status != "running":
            metrics.INSTANCES_ENDED.labels(code, status).inc()
            # Where, never the message: a script's error may quote the instance's variables.
            log.info("instance %s of %s %s%s", instance_id, code, status,
                     f" at {outcome.error.get('element_id')}" if outcome.error else "")
