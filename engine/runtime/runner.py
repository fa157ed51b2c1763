"""Advancing instances: the only code that steps SpiffWorkflow (``Runner.advance``).

One advance handles one job of an instance, in the unit of work its worker began: take the
instance's row (read by the claim, or loaded), end that read, apply the job's event and run the
engine steps with no transaction open, then write the new state, delete the job and add what the
contributors (``engine.runtime.advance``) write with it, guarded by the instance's revision
(compare-and-swap). A save that finds another revision, or a job whose lease was lost, raises
``writes.Lost``: the worker rolls the whole unit back and the job goes back to the queue, so an
instance is never advanced by two workers at once.

An advance no contributor adds to is a plain save: the instance and its job only, on the driver
connection. A worker that claimed several jobs at once runs them as a batch (``begin_batch``,
``take_batch``, ``save_batch``): their plain saves wait for the batch's end and are written in one
unit of work, each still all or nothing on its own (SQLite's write lock taken once, one WAL flush
on PostgreSQL) for up to ``WorkerPool.CLAIM_BATCH`` advances.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

from sqlalchemy import bindparam, select, update

from engine import jobs
from engine.chat import outbox as chat_outbox
from engine.errors import CallActivityError
from engine.jobs import kinds
from engine.runtime import stepping
from engine.runtime.advance import Advance, Contributor
from engine.runtime.events import Events
from engine.runtime.outcome import Outcome
from engine.store import history, workflows, writes
from engine.store.db import utcnow
from engine.store.models import Instance
from engine.store.unit_of_work import SYSTEM, UnitOfWork
from engine.telemetry import metrics

log = logging.getLogger("baton.runner")

INTERNAL_FAILURE = "An internal error stopped this instance; it can be retried."
_instances = Instance.__table__
_LOAD = (select(_instances.c.tenant_id, _instances.c.status, _instances.c.revision, _instances.c.state,
                _instances.c.definition_id, _instances.c.variables, _instances.c.called_definitions,
                _instances.c.waiting_for)
         .where(_instances.c.id == bindparam("id")))


@dataclass
class Batch:
    """The plain saves a worker's batch left waiting for its end."""

    advances: list[Advance]

    @property
    def jobs(self) -> list[jobs.ClaimedJob]:
        return [advance.job for advance in self.advances]


class Runner:
    """Job handler of every instance job kind (``engine.jobs.kinds.INSTANCE_KINDS``)."""

    def __init__(self, script_engine, spec_cache: workflows.SpecCache, contributors: Sequence[Contributor],
                 check_url: Callable[[str], object] | None = None):
        self.script_engine = script_engine
        self.check_url = check_url or chat_outbox.public_only
        self.specs = spec_cache
        self.contributors = tuple(contributors)
        self.events = Events(script_engine)
        # Per worker (thread) in a batch: its advances whose saves wait for ``take_batch``.
        self._batches: dict[str, list[Advance]] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.events.by_kind)

    def handle(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        started = time.perf_counter()
        self.advance(job, worker_id, uow)
        metrics.ADVANCE_SECONDS.labels(job.kind).observe(time.perf_counter() - started)

    def advance(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        # The row the claim read (no read transaction of its own), else a fresh read.
        row = job.instance_row or _load(uow, job)
        if row is None or row.status != "running":
            self._drop(uow, job, worker_id, row)
            return
        try:
            specs, pinned = self.specs.resolve(uow, row.tenant_id, row.definition_id, row.called_definitions)
        except CallActivityError as exc:
            self._fail_unchanged(uow, job, worker_id, row, exc.message)
            return
        outbox = chat_outbox.Outbox.for_instance(uow, job.instance_id, specs, self.script_engine.sandbox,
                                                 self.check_url)
        if outbox is not None and job.instance_row is not None:
            # A talking process reads its conversation and its row in one transaction.
            row = _load(uow, job)
            if row is None or row.status != "running":
                self._drop(uow, job, worker_id, row)
                return
        uow.end_read()  # no transaction (nor SQLite's write lock) while the engine runs

        engine = self.script_engine.for_tenant(row.tenant_id)  # its scripts run in this tenant's hosts
        workflow = workflows.restore_workflow(row.state, specs, engine) if row.state else None
        payload = {**job.payload, "_specs": specs, "_variables": row.variables or {}, "_script_engine": engine}
        outcome = stepping.run(workflow, lambda: self.events.apply(job.kind, workflow, payload), outbox)
        self._save(uow, Advance(job, worker_id, row, specs, pinned, outcome, outbox))

    # -- saving --------------------------------------------------------------------------------

    def _save(self, uow: UnitOfWork, advance: Advance) -> None:
        """The instance and its job, then what the contributors add. An advance that no contributor
        adds to is a plain save on the driver connection, now or at the end of its worker's batch."""
        contributions = [write for write in (c.contribute(advance) for c in self.contributors) if write is not None]
        if not contributions:
            batch = self._batches.get(advance.worker_id)
            if batch is not None:
                batch.append(advance)
                return
            uow.on_driver(single_write=_one_write(advance))
            _save_instance_and_job(uow, advance)
        else:
            _save_instance_and_job(uow, advance)
            for write in contributions:
                write(uow)
        uow.after_commit(partial(_report_saved, advance, _reported_code(uow, advance)))

    # -- batches -------------------------------------------------------------------------------

    def begin_batch(self, worker_id: str) -> None:
        """The worker's next jobs are one claimed batch: their plain saves wait for ``take_batch``."""
        self._batches[worker_id] = []

    def take_batch(self, worker_id: str) -> Batch | None:
        """The plain saves the worker's batch left waiting (None: none)."""
        waiting = self._batches.pop(worker_id, None)
        return Batch(waiting) if waiting else None

    @staticmethod
    def save_batch(batch: Batch, uow: UnitOfWork) -> list[jobs.ClaimedJob]:
        """Write a batch's plain saves in ``uow`` (on the driver), each all or nothing: one that is
        lost (instance or lease changed) leaves the others saved. Returns the lost ones' jobs."""
        advances = batch.advances
        uow.on_driver(single_write=len(advances) == 1 and _one_write(advances[0]))
        lost = []
        for advance in advances:
            try:
                with writes.all_or_nothing(uow):
                    _save_instance_and_job(uow, advance)
            except writes.Lost:
                lost.append(advance.job)
                continue
            uow.after_commit(partial(_report_saved, advance, _reported_code(uow, advance)))
        return lost

    # -- failing -------------------------------------------------------------------------------

    def give_up(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        """A job kept failing for a reason that is ours, not the process's: fail the instance, and
        keep the job (a task completion, a message ...) for ``process.retry`` to apply again."""
        if not jobs.lock(uow, job, worker_id):
            _left(job, worker_id)
            return
        failed = uow.execute(
            update(Instance).where(Instance.id == job.instance_id, Instance.status == "running")
            .values(status="failed", completed_at=utcnow(), revision=Instance.revision + 1,
                    error={"message": INTERNAL_FAILURE, "element_id": None}))
        if failed.rowcount == 1:
            _record_failure(uow, job, {"message": INTERNAL_FAILURE, "element_id": None})
        _keep_for_retry(uow, job, worker_id, failed.rowcount == 1)

    def _fail_unchanged(self, uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, row, message: str) -> None:
        """Fail an instance that cannot even be loaded (its called process is gone); keep its state."""
        if not jobs.lock(uow, job, worker_id):
            _left(job, worker_id)
            return
        failed = uow.execute(
            update(Instance).where(Instance.id == job.instance_id, Instance.revision == row.revision)
            .values(status="failed", completed_at=utcnow(), revision=row.revision + 1,
                    error={"message": message, "element_id": None}))
        if failed.rowcount == 1:
            _record_failure(uow, job, {"message": message, "element_id": None})
        _keep_for_retry(uow, job, worker_id, failed.rowcount == 1)

    @staticmethod
    def _drop(uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, row) -> None:
        """The instance ended (or was cancelled) before this job ran: the job has nothing to do.
        A worker's report for an instance that failed meanwhile is kept for ``process.retry``: its
        external-task row is already completed, so nothing else would ever bring it back."""
        if row is not None and row.status == "failed" and job.kind == kinds.EXTERNAL_RESULT:
            jobs.hold(uow, job, worker_id, "held: its instance failed; process.retry applies it")
        else:
            jobs.finish(uow, job, worker_id)


def _load(uow: UnitOfWork, job: jobs.ClaimedJob):
    return uow.run(_LOAD, {"id": job.instance_id}).one_or_none()


def _save_instance_and_job(uow: UnitOfWork, advance: Advance) -> None:
    job, row, outcome = advance.job, advance.row, advance.outcome
    writes.save_advance(uow, job.instance_id, row.revision, {
        "status": outcome.status, "state": outcome.state, "variables": outcome.variables,
        "waiting_for": outcome.waiting_for, "output_keys": outcome.output_keys, "error": outcome.error,
        "revision": row.revision + 1, "called_definitions": advance.pinned or None,
        "completed_at": utcnow() if outcome.status != "running" else None}, job.id, advance.worker_id,
        _end_event(advance))
    writes.add_path_steps(uow, row.tenant_id, job.instance_id, outcome.steps)


def _end_event(advance: Advance) -> dict | None:
    """What an advance adds to its instance's history, written by the save itself: the incident
    that failed it. (Its completion is written by the database's trigger on the status, migration
    0021; the rest where it happens: a task's completion, a message's arrival ... by the call that
    brought it.)"""
    if advance.outcome.status == "failed":
        return _failure_event(advance.tenant_id, advance.instance_id, advance.outcome.error or {})
    return None


def _one_write(advance: Advance) -> bool:
    """Whether the save is one statement (so, on PostgreSQL, a transaction in autocommit)."""
    return not advance.outcome.steps


def _failure_event(tenant_id: int, instance_id: int, error: dict) -> dict:
    return history.event(tenant_id=tenant_id, instance_id=instance_id, kind="failed", actor=SYSTEM,
                         element_id=error.get("element_id"), detail={"message": error.get("message")})


def _record_failure(uow: UnitOfWork, job: jobs.ClaimedJob, error: dict) -> None:
    history.record_many(uow, [_failure_event(job.tenant_id, job.instance_id, error)])


def _left(job: jobs.ClaimedJob, worker_id: str) -> None:
    """The job went with its cancelled instance, or to another worker after its lease ran out:
    the instance is not this worker's to fail."""
    log.info("job %s left worker %s before it could fail its instance", job.id, worker_id)


def _keep_for_retry(uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, failed_now: bool) -> None:
    if not failed_now:  # the instance had already ended (cancelled, say): nothing will retry it
        jobs.finish(uow, job, worker_id)
        return
    chat_outbox.close_for_instance(uow, job.instance_id)
    jobs.hold(uow, job, worker_id, "held: its instance failed; process.retry queues it again")
    definition_id = uow.execute(select(Instance.definition_id).where(Instance.id == job.instance_id)).scalar_one()
    code = workflows.definition_code(uow, definition_id)
    uow.after_commit(lambda: metrics.INSTANCES_ENDED.labels(code, "failed").inc())


def _reported_code(uow: UnitOfWork, advance: Advance) -> str | None:
    """The definition's code when the save starts or ends the instance (its metrics name it)."""
    if advance.row.state is None or not advance.running:
        return workflows.definition_code(uow, advance.row.definition_id)
    return None


def _report_saved(advance: Advance, code: str | None) -> None:
    """Metrics and log of a saved advance: an instance's first save starts it, a final status ends it."""
    row, outcome, status = advance.row, advance.outcome, advance.outcome.status
    if code is not None:
        if row.state is None:
            metrics.INSTANCES_STARTED.labels(code).inc()
        if status != "running":
            metrics.INSTANCES_ENDED.labels(code, status).inc()
            # Where, never the message: a script's error may quote the instance's variables.
            log.info("instance %s of %s %s%s", advance.instance_id, code, status,
                     f" at {outcome.error.get('element_id')}" if outcome.error else "")


__all__ = ["Batch", "Outcome", "Runner"]
