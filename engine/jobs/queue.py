"""The durable job queue: a table in the application's own database.

``enqueue`` adds a job to the caller's unit of work, so the job commits (or not) with the state
change that causes it. ``claim`` leases ready jobs to a worker: on PostgreSQL with ``FOR UPDATE SKIP
LOCKED``, on SQLite inside the ``BEGIN IMMEDIATE`` write lock. An instance's jobs run one at a
time and in order: a job is not claimed while an earlier due job of its instance exists or while
another job of its instance is leased. A finished job is deleted in the transaction that saves
its effect (``finish``); a killed worker's lease runs out and the job is claimed again.
"""
from __future__ import annotations

import functools
import json
from collections import namedtuple
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, delete, exists, func, literal, or_, select, update

from engine.store import writes
from engine.store.db import utcnow
from engine.store.driver import Statement
from engine.store.models import Instance, Job
from engine.store.unit_of_work import UnitOfWork


@dataclass(frozen=True)
class KindFilter:
    """Which job kinds a worker pool runs: only ``names`` (``include``), or every other kind."""

    names: frozenset[str]
    include: bool

    def condition(self, column):
        # Bound one by one (not an "expanding" IN): the claim's statements run on the DBAPI
        # connection (``Statement.run``), compiled once.
        names = [literal(name) for name in sorted(self.names)]
        return column.in_(names) if self.include else column.not_in(names)

    def runs(self, kind: str | None) -> bool:
        return kind is None or (kind in self.names) == self.include


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    tenant_id: int
    instance_id: int | None
    kind: str
    payload: dict[str, Any]
    attempts: int
    # The instance's row as the claim transaction saw it (an ``InstanceRow``), so
    # that an advance needs no read transaction of its own; None: the job has no instance or it
    # is gone. A row that changes after the claim fails the advance's revision check, and the
    # job is tried again with a fresh read.
    instance_row: Any = field(default=None, compare=False, repr=False)
    # A job handed over with ``enqueue(prepare=True)``: what its handler's ``prepare`` did in the
    # transaction that queued it (the handler's first transaction, done there). None otherwise.
    prepared: Any = field(default=None, compare=False, repr=False)


def enqueue(uow: UnitOfWork, tenant_id: int, kind: str, *, instance_id: int | None = None,
            payload: dict[str, Any] | None = None, run_at: datetime | None = None, prepare: bool = False) -> None:
    """Add a job to the unit of work; it becomes visible (and wakes workers) when that commits.

    A job due now, of no instance, that a worker pool of this process runs (an AI turn, a delivery,
    an HTTP task) is leased to that pool in this very transaction and handed to it in memory at
    commit: no claim transaction, no wake-up to wait for. Crash-safe as a claimed job is: if the
    process dies first, the lease runs out and any worker claims it (docs/internals.md, "Jobs
    handed over").

    ``prepare``: when the job is handed over, its handler's ``prepare(job, worker_id, uow)`` runs
    here, in this unit of work, and does what the handler's first transaction would (an AI turn
    takes the customer's messages and marks its dialog busy); what it returns is handed over with
    the job (``ClaimedJob.prepared``); None: it finished the job itself, nothing is handed over.
    """
    pool = _local_pool(uow, kind, instance_id, run_at)
    if pool is None:
        writes.add_job(uow, tenant_id, kind, instance_id=instance_id, payload=payload, run_at=run_at)
        return
    payload = json.loads(json.dumps(payload or {}))  # what a claim would read back from the column
    job_id = writes.add_handed_job(uow, tenant_id, kind, payload, pool.holder_id,
                                   utcnow() + timedelta(seconds=pool.lease_seconds))
    job = ClaimedJob(job_id, tenant_id, None, kind, payload, 1)
    if prepare:
        prepared = pool.handlers[kind].prepare(job, pool.holder_id, uow)
        if prepared is None:
            return
        job = replace(job, prepared=prepared)
    uow.hand_over(pool, job)


def _local_pool(uow: UnitOfWork, kind: str, instance_id: int | None, run_at: datetime | None):
    """The pool of this process a new job may be handed to, if any. Not an instance's job: those
    run one at a time per instance, in order, which only the claim knows."""
    taker = getattr(uow.wakers, "taker", None)
    if instance_id is not None or taker is None or (run_at is not None and run_at > utcnow()):
        return None
    return taker(kind)


_jobs = Job.__table__  # the hot path's statements are Core, on the table: no ORM layer


_instances = Instance.__table__
# The instance columns an advance starts from (``ClaimedJob.instance_row``).
INSTANCE_COLUMNS = ("id", "tenant_id", "status", "revision", "state", "definition_id", "variables",
                    "called_definitions", "waiting_for")
InstanceRow = namedtuple("InstanceRow", INSTANCE_COLUMNS)
_JOB_COLUMNS = ("id", "tenant_id", "instance_id", "kind", "payload", "attempts")


@functools.lru_cache(maxsize=None)
def _claim_statements(postgres: bool, limit: int, kinds: KindFilter | None) -> tuple[Statement, ...]:
    """The claim's statements, built once (building and cache-keying them on every call cost more
    CPU than the database spends executing them).

    PostgreSQL: ONE statement: pick (``FOR UPDATE SKIP LOCKED``), lease, and read the jobs'
    instances. SQLite (no data-modifying CTEs): lease what the pick finds in one UPDATE, then
    read the instances of the jobs just leased, in the same write transaction.
    """
    now = bindparam("now")
    other = _jobs.alias("other")
    blocked = exists().where(
        other.c.instance_id == _jobs.c.instance_id, other.c.id != _jobs.c.id,
        or_(and_(other.c.id < _jobs.c.id, other.c.run_at <= now), other.c.locked_until >= now))
    # In (run_at, id) order, the order of ix_jobs_run_at_id: the scan stops at the first ready
    # job instead of visiting and sorting every due job, so a claim costs the same with a
    # backlog of thousands as with none. Per instance, jobs still run one at a time and in id
    # order: that is the ``blocked`` condition's work, whatever the scan order.
    pick = (select(_jobs.c.id)
            .where(_jobs.c.run_at <= now,
                   or_(_jobs.c.locked_until.is_(None), _jobs.c.locked_until < now), ~blocked)
            .order_by(_jobs.c.run_at, _jobs.c.id).limit(limit))
    if kinds is not None:
        pick = pick.where(kinds.condition(_jobs.c.kind))
    lease = update(_jobs).values(locked_by=bindparam("worker_id"), locked_until=bindparam("locked_until"),
                                 attempts=_jobs.c.attempts + 1)
    returned = [_jobs.c[name] for name in _JOB_COLUMNS] + [_jobs.c.run_at]
    if postgres:
        picked = pick.with_for_update(skip_locked=True, of=_jobs).cte("picked")
        leased = lease.where(_jobs.c.id == picked.c.id).returning(*returned).cte("leased")
        return (Statement(
            select(*[leased.c[name] for name in _JOB_COLUMNS],
                   *[_instances.c[name].label(f"instance_row_{name}") for name in INSTANCE_COLUMNS])
            .select_from(leased.outerjoin(_instances, _instances.c.id == leased.c.instance_id))
            .order_by(leased.c.run_at, leased.c.id), writes=True),)
    mine = select(_jobs.c.instance_id).where(_jobs.c.locked_by == bindparam("worker_id"),
                                             _jobs.c.locked_until == bindparam("locked_until"))
    return (Statement(lease.where(_jobs.c.id.in_(pick.scalar_subquery())).returning(*returned)),
            Statement(select(*[_instances.c[name] for name in INSTANCE_COLUMNS])
                      .where(_instances.c.id.in_(mine.scalar_subquery()))))


def claim(uow: UnitOfWork, worker_id: str, lease_seconds: float, limit: int = 1,
          kinds: KindFilter | None = None) -> list[ClaimedJob]:
    """Lease up to ``limit`` ready jobs (of ``kinds``, default any) to ``worker_id`` in the unit of work."""
    return claim_or_next(uow, worker_id, lease_seconds, limit, kinds)[0]


def claim_or_next(uow: UnitOfWork, worker_id: str, lease_seconds: float, limit: int = 1,
                  kinds: KindFilter | None = None) -> tuple[list[ClaimedJob], datetime | None]:
    """Lease up to ``limit`` ready jobs (of ``kinds``, default any) to ``worker_id`` in the unit of
    work; with none found, also when to look again (``_next_run``), read in the same transaction (a
    worker about to sleep needs it: one transaction instead of two, after every job at low load),
    else None.

    Oldest due first, at most one job per instance (a leased job holds back its instance's others).
    The worker runs it in a unit of work of its own on the driver with a single write: on
    PostgreSQL one statement in autocommit, one round trip.
    """
    now = utcnow()
    params = {"now": now, "worker_id": worker_id, "locked_until": now + timedelta(seconds=lease_seconds)}
    width = len(_JOB_COLUMNS)
    if uow.postgres:
        [statement] = _claim_statements(True, limit, kinds)
        rows = uow.rows(statement, params)
        claimed = [ClaimedJob(*row[:width], instance_row=InstanceRow(*row[width:])
                              if row[width] is not None else None) for row in rows]
    else:
        lease, read = _claim_statements(False, limit, kinds)
        rows = sorted(uow.rows(lease, params), key=lambda row: (row[width], row[0]))  # (run_at, id)
        instances = {row[0]: InstanceRow(*row) for row in uow.rows(read, params)} if rows else {}
        claimed = [ClaimedJob(*row[:width], instance_row=instances.get(row[2])) for row in rows]
    # Reads after the claim's one write (in autocommit on PostgreSQL: each its own snapshot, as
    # a transaction of their own was).
    next_at = None if claimed else _next_run(uow, kinds, now)
    return claimed, next_at


def finish(uow: UnitOfWork, job: ClaimedJob, worker_id: str) -> bool:
    """Delete a done job in the unit of work; False if the lease was lost meanwhile."""
    try:
        writes.finish_job(uow, job.id, worker_id, job.instance_id)
    except writes.Lost:
        return False
    return True


_EXTEND_LEASE = (update(Job).where(Job.id == bindparam("job_id"), Job.locked_by == bindparam("worker_id"))
                 .values(locked_until=bindparam("until")))


def extend_lease(uow: UnitOfWork, job: ClaimedJob, worker_id: str, seconds: float) -> None:
    """Keep a job leased for ``seconds`` more (before a long outbound call), in the unit of work."""
    uow.execute(_EXTEND_LEASE, {"job_id": job.id, "worker_id": worker_id,
                                "until": utcnow() + timedelta(seconds=seconds)})


def release(uow: UnitOfWork, job: ClaimedJob, worker_id: str, *, delay_seconds: float = 0.0,
            error: str | None = None, unclaim: bool = False) -> None:
    """Give a job back, to be tried again after ``delay_seconds`` (nothing if it is no longer
    ``worker_id``'s). ``unclaim``: the job was never tried (the rest of a batch given back): its
    claim is not an attempt."""
    uow.execute(
        update(Job).where(Job.id == job.id, Job.locked_by == worker_id)
        .values(locked_by=None, locked_until=None, last_error=error,
                run_at=utcnow() + timedelta(seconds=delay_seconds),
                attempts=Job.attempts - 1 if unclaim else Job.attempts))


def release_unfinished(uow: UnitOfWork, held: list[tuple[ClaimedJob, str]]) -> int:
    """A stopping worker gives back the jobs its threads (``(job, worker_id)``) still hold: due now,
    no lease, the interrupted claim not counted as an attempt; the workers of this process and, on
    PostgreSQL, of every process (NOTIFY) wake at commit. Returns how many it still held (a job its
    thread finished meanwhile is left alone)."""
    now, released = utcnow(), 0
    for job, worker_id in held:
        result = uow.execute(
            update(Job).where(Job.id == job.id, Job.locked_by == worker_id)
            .values(locked_by=None, locked_until=None, run_at=now, attempts=Job.attempts - 1)
            .execution_options(synchronize_session=False))
        if result.rowcount:
            released += 1
            uow.ready(job.kind)
    return released


HELD_UNTIL = datetime(9999, 1, 1)  # run_at of a job kept aside, never due by itself


def lock(uow: UnitOfWork, job: ClaimedJob, worker_id: str) -> bool:
    """Lock a job this worker holds, in the unit of work, before its instance's row: the order an
    advance's save and ``process.cancel`` take them (the other order deadlocks with them on
    PostgreSQL). False if the job is gone (cancelled with its instance) or no longer this
    worker's. (SQLite: nothing to lock; its writers take turns.)"""
    held = uow.execute(select(Job.id).where(Job.id == job.id, Job.locked_by == worker_id).with_for_update())
    return held.first() is not None


def hold(uow: UnitOfWork, job: ClaimedJob, worker_id: str, error: str) -> None:
    """Keep a job that cannot be done now (its instance failed) instead of deleting it:
    ``requeue_held`` puts it back when the instance is retried."""
    uow.execute(update(Job).where(Job.id == job.id, Job.locked_by == worker_id)
                .values(locked_by=None, locked_until=None, run_at=HELD_UNTIL, attempts=0, last_error=error))


def requeue_held(uow: UnitOfWork, instance_id: int) -> int:
    """Queue an instance's held jobs again, after every job queued so far (new ids, same order)."""
    held = uow.execute(select(Job.id, Job.tenant_id, Job.kind, Job.payload)
                       .where(Job.instance_id == instance_id, Job.run_at == HELD_UNTIL).order_by(Job.id)).all()
    for job in held:
        enqueue(uow, job.tenant_id, job.kind, instance_id=instance_id, payload=job.payload)
    if held:
        uow.execute(delete(Job).where(Job.id.in_([job.id for job in held])))
    return len(held)


def _next_run(uow: UnitOfWork, kinds: KindFilter | None, now: datetime) -> datetime | None:
    """When a worker (running ``kinds``, default any) that found nothing more to claim should look
    again: the earliest due time of a job that nothing holds back, or the earliest end of a lease
    (a dead worker's job becomes claimable then). A job held back by a live lease of its instance
    is not counted: ``finish`` wakes the workers when that lease's job is done."""
    found = [uow.rows(statement, {"now": now})[0][0] for statement in _next_run_statements(kinds)]
    return min((t for t in found if t is not None), default=None)


@functools.lru_cache(maxsize=16)
def _next_run_statements(kinds: KindFilter | None):
    """``_next_run``'s two statements for a pool's kinds, built once: every worker that finds nothing
    to claim runs them, and building them cost more than running them."""
    now = bindparam("now")
    other = _jobs.alias("other")
    held = exists().where(other.c.instance_id == _jobs.c.instance_id, other.c.id != _jobs.c.id,
                          other.c.locked_until >= now)
    of_kinds = [kinds.condition(_jobs.c.kind)] if kinds is not None else []
    next_due = select(func.min(_jobs.c.run_at)).where(
        or_(_jobs.c.locked_until.is_(None), _jobs.c.locked_until < now), ~held, *of_kinds)
    next_lease_end = select(func.min(_jobs.c.locked_until)).where(_jobs.c.locked_until >= now, *of_kinds)
    return Statement(next_due), Statement(next_lease_end)
