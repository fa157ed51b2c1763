"""External tasks as workers see them (Camunda's pattern): fetch and lock by topic, with long
polling; complete, report a failure or a BPMN error, extend the lock; and the list.

Exactly once per lock: fetching locks a row to one worker until ``lock_expires_at`` (PostgreSQL:
``FOR UPDATE SKIP LOCKED``; SQLite: the write lock), and each report is one conditional UPDATE that
only the lock's holder, before it expires, can win; the job that carries the result to the
instance is queued in the same transaction. An expired lock frees the task for the next fetch.
A long poll waits with no transaction open (``engine.jobs.wakers.LongPoll``). The rows open and
close with the instance state (``engine.runtime.external_task_rows``).
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from sqlalchemy import or_, select, update

from engine import jobs
from engine.errors import ConflictError, NotFoundError
from engine.jobs.kinds import EXTERNAL_RESULT
from engine.jobs.retry import external_retry_at
from engine.jobs.wakers import LongPoll
from engine.store import history
from engine.store.db import iso, utcnow
from engine.store.models import ExternalTaskRow, Instance
from engine.store.paging import page_of
from engine.store.unit_of_work import UnitOfWork

STATUSES = ("open", "completed", "cancelled")


def fetch_and_lock(uow: UnitOfWork, tenant_id: int, worker_id: str, topics: dict[str, int], *, max_tasks: int, wait_ms: int,
                   long_poll: LongPoll) -> dict[str, Any]:
    """Lock up to ``max_tasks`` open tasks of ``topics`` ({name: lock duration in ms}) to the
    worker, oldest first; with none, wait up to ``wait_ms`` for some (a long poll)."""
    deadline = time.monotonic() + wait_ms / 1000
    with long_poll.slot() as may_wait:
        while True:
            seen = long_poll.generation()
            locked = _lock(uow, tenant_id, worker_id, topics, max_tasks)
            remaining = deadline - time.monotonic()
            if locked or not may_wait or remaining <= 0:
                return {"tasks": locked}
            long_poll.wait(seen, remaining)


def _lock(uow: UnitOfWork, tenant_id: int, worker_id: str, topics: dict[str, int], max_tasks: int) -> list[dict[str, Any]]:
    """Pick and lock, in the unit of work; the answer is built before it commits."""
    now = utcnow()
    pick = (select(ExternalTaskRow).join(Instance, Instance.id == ExternalTaskRow.instance_id)
            .where(ExternalTaskRow.tenant_id == tenant_id, ExternalTaskRow.status == "open",
                   ExternalTaskRow.topic.in_(sorted(topics)), Instance.status == "running",
                   or_(ExternalTaskRow.lock_expires_at.is_(None), ExternalTaskRow.lock_expires_at <= now),
                   or_(ExternalTaskRow.retries.is_(None), ExternalTaskRow.retries > 0),
                   or_(ExternalTaskRow.retry_at.is_(None), ExternalTaskRow.retry_at <= now))
            .order_by(ExternalTaskRow.id).limit(max_tasks))
    if uow.postgres:
        pick = pick.with_for_update(skip_locked=True, of=ExternalTaskRow)
    rows = uow.execute(pick).scalars().all()
    if not rows:
        uow.end_read()  # nothing is held while the long poll waits
        return []
    for row in rows:
        row.worker_id = worker_id
        row.lock_expires_at = now + timedelta(milliseconds=topics[row.topic])
    return [{**_item(row), "variables": row.variables or {}} for row in rows]


def complete(uow: UnitOfWork, tenant_id: int, task_id: int, worker_id: str, variables: dict[str, Any]) -> dict[str, Any]:
    row = _held(uow, tenant_id, task_id, worker_id, status="completed")
    _queue_result(uow, row, {"outcome": "complete", "variables": variables})
    return {"task_id": task_id, "status": "completed", "instance_id": row.instance_id}


def bpmn_error(uow: UnitOfWork, tenant_id: int, task_id: int, worker_id: str, error_code: str, message: str | None,
               variables: dict[str, Any]) -> dict[str, Any]:
    """The worker's BPMN error goes to the task's error boundary event (none: the instance fails)."""
    row = _held(uow, tenant_id, task_id, worker_id, status="completed")
    _queue_result(uow, row, {"outcome": "bpmn_error", "error_code": error_code, "message": message,
                        "variables": variables})
    return {"task_id": task_id, "status": "completed", "instance_id": row.instance_id}


def failure(uow: UnitOfWork, tenant_id: int, task_id: int, worker_id: str, message: str, retries: int,
            retry_timeout_ms: int) -> dict[str, Any]:
    """With retries left the task is fetchable again after ``retry_timeout_ms``; with none the
    instance fails at the task (``process.retry`` gives it back to the workers)."""
    now = utcnow()
    retry_at = external_retry_at(now, retry_timeout_ms) if retries > 0 else None
    row = _held(uow, tenant_id, task_id, worker_id, status="open", retries=retries, retry_at=retry_at,
                error_message=message)
    if retries == 0:
        _queue_result(uow, row, {"outcome": "failure", "message": message, "topic": row.topic})
    return {"task_id": task_id, "status": "open", "instance_id": row.instance_id, "retries": retries,
            "retry_at": iso(retry_at), "instance_fails": retries == 0}


def extend_lock(uow: UnitOfWork, tenant_id: int, task_id: int, worker_id: str, lock_duration_ms: int) -> dict[str, Any]:
    expires = utcnow() + timedelta(milliseconds=lock_duration_ms)
    row = _held(uow, tenant_id, task_id, worker_id, status="open", lock_expires_at=expires, keep_lock=True)
    return {"task_id": task_id, "worker_id": worker_id, "lock_expires_at": iso(row.lock_expires_at)}


def _held(uow: UnitOfWork, tenant_id: int, task_id: int, worker_id: str, *, status: str, keep_lock: bool = False,
          **values: Any) -> ExternalTaskRow:
    """Apply ``values`` to a task this worker holds a live lock on, or raise saying why it cannot:
    one conditional UPDATE, so of two reports (or a report and an expiry) exactly one wins."""
    now = utcnow()
    if not keep_lock:
        values.update(worker_id=None, lock_expires_at=None)
    if status != "open":
        values["completed_at"] = now
    won = uow.execute(
        update(ExternalTaskRow).where(ExternalTaskRow.id == task_id, ExternalTaskRow.tenant_id == tenant_id,
                                   ExternalTaskRow.status == "open", ExternalTaskRow.worker_id == worker_id,
                                   ExternalTaskRow.lock_expires_at > now)
        .values(status=status, **values)).rowcount == 1
    row = uow.execute(select(ExternalTaskRow).where(
        ExternalTaskRow.id == task_id, ExternalTaskRow.tenant_id == tenant_id)).scalar_one_or_none()
    if not won:
        raise _why_not_held(row, task_id, worker_id, now)
    return row


def _why_not_held(row: ExternalTaskRow | None, task_id: int, worker_id: str, now) -> Exception:
    if row is None:
        return NotFoundError(f"External task {task_id} not found.")
    if row.status != "open":
        return ConflictError(f"External task {task_id} is {row.status}.")
    if row.worker_id != worker_id or row.lock_expires_at is None:
        return ConflictError(f"External task {task_id} is not locked by worker '{worker_id}'; fetch it first.")
    return ConflictError(f"The lock of worker '{worker_id}' on external task {task_id} expired at "
                         f"{iso(row.lock_expires_at)}; fetch it again.")


def _queue_result(uow: UnitOfWork, row: ExternalTaskRow, result: dict[str, Any]) -> None:
    """The job that carries the worker's result to the instance, in the report's transaction."""
    jobs.enqueue(uow, row.tenant_id, EXTERNAL_RESULT, instance_id=row.instance_id,
                 payload={"spiff_task_id": row.spiff_task_id, **result})
    if result["outcome"] != "failure":  # a failure is recorded when it fails the instance
        history.record(uow, tenant_id=row.tenant_id, instance_id=row.instance_id, kind="task_completed",
                       element_id=row.element_id, detail={"external_task_id": row.id, **({"bpmn_error": result["error_code"]}
                                                                     if result["outcome"] == "bpmn_error" else {})})


def cancel_open(uow: UnitOfWork, instance_id: int) -> None:
    """Every open external task of an instance becomes cancelled (the instance was cancelled)."""
    uow.execute(update(ExternalTaskRow).where(ExternalTaskRow.instance_id == instance_id,
                                                  ExternalTaskRow.status == "open")
                       .values(status="cancelled", completed_at=utcnow(), worker_id=None, lock_expires_at=None))


def _item(row: ExternalTaskRow) -> dict[str, Any]:
    return {"task_id": row.id, "topic": row.topic, "instance_id": row.instance_id,
            "definition_id": row.definition_id, "element_id": row.element_id,
            "worker_id": row.worker_id, "lock_expires_at": iso(row.lock_expires_at),
            "retries": row.retries, "error_message": row.error_message}


def list_tasks(uow: UnitOfWork, tenant_id: int, *, status: str | None, topic: str | None, instance_id: int | None,
               page: int, per_page: int) -> dict[str, Any]:
    """The tenant's external tasks, newest first; a lock shows only while it holds."""
    conditions = [ExternalTaskRow.tenant_id == tenant_id]
    for column, value in ((ExternalTaskRow.status, status), (ExternalTaskRow.topic, topic),
                          (ExternalTaskRow.instance_id, instance_id)):
        if value is not None:
            conditions.append(column == value)
    now = utcnow()

    def item(row: ExternalTaskRow) -> dict[str, Any]:
        locked = row.lock_expires_at is not None and row.lock_expires_at > now
        return {**_item(row), "status": row.status, "worker_id": row.worker_id if locked else None,
                "lock_expires_at": iso(row.lock_expires_at) if locked else None, "retry_at": iso(row.retry_at),
                "variables": row.variables or {}, "created_at": iso(row.created_at),
                "completed_at": iso(row.completed_at)}

    return page_of(uow, select(ExternalTaskRow).where(*conditions), ExternalTaskRow.id, page=page, per_page=per_page,
                   scalars=True, item=item)
