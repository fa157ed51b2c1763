"""The durable job queue: a table in the application's own database.

``enqueue`` adds a job to the caller's session, so the job commits (or not) with the state change
that causes it. ``claim`` leases ready jobs to a worker: on PostgreSQL with ``FOR UPDATE SKIP
LOCKED``, on SQLite inside the ``BEGIN IMMEDIATE`` write lock. An instance's jobs run one at a
time and in order: a job is not claimed while an earlier due job of its instance exists or while
another job of its instance is leased. A finished job is deleted in the transaction that saves
its effect (``finish``); a killed worker's lease runs out and the job is claimed again.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from sqlalchemy import and_, delete, event, exists, func, or_, select, text, update
from sqlalchemy.orm import Session, aliased

from engine.db import db, is_postgres, utcnow
from engine.models import Job

NOTIFY_CHANNEL = "baton_jobs"
_wakers: list[Callable[[], None]] = []


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    tenant_id: int
    instance_id: int | None
    kind: str
    payload: dict[str, Any]
    attempts: int


def add_waker(waker: Callable[[], None]) -> None:
    """Called after every commit that enqueued a ready job (the in-process workers' wake-up)."""
    _wakers.append(waker)


def remove_waker(waker: Callable[[], None]) -> None:
    if waker in _wakers:
        _wakers.remove(waker)


def enqueue(tenant_id: int, kind: str, *, instance_id: int | None = None,
            payload: dict[str, Any] | None = None, run_at: datetime | None = None) -> Job:
    """Add a job to the current transaction; it becomes visible (and wakes workers) on commit."""
    job = Job(tenant_id=tenant_id, instance_id=instance_id, kind=kind, payload=payload or {},
              run_at=run_at or utcnow())
    db.session.add(job)
    _notify_on_commit()
    return job


def _notify_on_commit() -> None:
    """Wake workers when the current transaction commits: here directly, elsewhere by NOTIFY."""
    session_info = db.session.info
    if not session_info.get("baton_notify"):
        session_info["baton_notify"] = True
        if is_postgres():
            # Delivered by PostgreSQL at commit, to every LISTENing worker process.
            db.session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": NOTIFY_CHANNEL})


@event.listens_for(Session, "after_commit")
def _wake_after_commit(session):
    if session.info.pop("baton_notify", False):
        for waker in list(_wakers):
            waker()


@event.listens_for(Session, "after_rollback")
def _forget_after_rollback(session):
    session.info.pop("baton_notify", None)


def claim(worker_id: str, lease_seconds: float, limit: int = 1) -> list[ClaimedJob]:
    """Lease up to ``limit`` ready jobs to ``worker_id`` and commit the lease."""
    now = utcnow()
    other = aliased(Job)
    blocked = exists().where(
        other.instance_id == Job.instance_id, other.id != Job.id,
        or_(and_(other.id < Job.id, other.run_at <= now), other.locked_until >= now))
    query = (select(Job.id)
             .where(Job.run_at <= now, or_(Job.locked_until.is_(None), Job.locked_until < now), ~blocked)
             .order_by(Job.id).limit(limit))
    if is_postgres():
        query = query.with_for_update(skip_locked=True, of=Job)
    try:
        ids = list(db.session.execute(query).scalars())
        if not ids:
            db.session.rollback()
            return []
        db.session.execute(
            update(Job).where(Job.id.in_(ids))
            .values(locked_by=worker_id, locked_until=now + timedelta(seconds=lease_seconds),
                    attempts=Job.attempts + 1))
        rows = db.session.execute(
            select(Job.id, Job.tenant_id, Job.instance_id, Job.kind, Job.payload, Job.attempts)
            .where(Job.id.in_(ids)).order_by(Job.id)).all()
        db.session.commit()
    except Exception:
        db.session.rollback()
        raise
    return [ClaimedJob(*row) for row in rows]


def finish(job: ClaimedJob, worker_id: str) -> bool:
    """Delete a done job inside the caller's transaction; False if the lease was lost meanwhile.

    When the instance has a next job already due, workers are woken at commit: that job was
    held back only by this one.
    """
    result = db.session.execute(delete(Job).where(Job.id == job.id, Job.locked_by == worker_id))
    if result.rowcount != 1:
        return False
    if job.instance_id is not None and db.session.execute(
            select(Job.id).where(Job.instance_id == job.instance_id, Job.run_at <= utcnow()).limit(1)).first():
        _notify_on_commit()
    return True


def extend_lease(job: ClaimedJob, worker_id: str, seconds: float) -> None:
    """Keep a job leased for ``seconds`` more (before a long outbound call); commits."""
    db.session.execute(update(Job).where(Job.id == job.id, Job.locked_by == worker_id)
                       .values(locked_until=utcnow() + timedelta(seconds=seconds)))
    db.session.commit()


def release(job: ClaimedJob, worker_id: str, *, delay_seconds: float = 0.0, error: str | None = None) -> None:
    """Give a job back (to be tried again after ``delay_seconds``) and commit."""
    db.session.rollback()
    db.session.execute(
        update(Job).where(Job.id == job.id, Job.locked_by == worker_id)
        .values(locked_by=None, locked_until=None, last_error=error,
                run_at=utcnow() + timedelta(seconds=delay_seconds)))
    db.session.commit()


def next_run_at() -> datetime | None:
    """When a worker that found nothing to claim should look again.

    The earliest due time of a job that nothing holds back, or the earliest end of a lease (a dead
    worker's job becomes claimable then). A job held back by a live lease of its instance is not
    counted: ``finish`` wakes the workers when that lease's job is done.
    """
    now = utcnow()
    other = aliased(Job)
    held = exists().where(other.instance_id == Job.instance_id, other.id != Job.id, other.locked_until >= now)
    next_due = db.session.execute(
        select(func.min(Job.run_at)).where(or_(Job.locked_until.is_(None), Job.locked_until < now), ~held)
    ).scalar_one_or_none()
    next_lease_end = db.session.execute(
        select(func.min(Job.locked_until)).where(Job.locked_until >= now)).scalar_one_or_none()
    db.session.rollback()
    return min((t for t in (next_due, next_lease_end) if t is not None), default=None)
