"""Human tasks as callers see them: ``task.list``, ``task.complete`` and the CRM callback.

Both ways of completing apply one set of rules (``_complete``): the row is marked completed and
the job that continues the instance is queued in one transaction; of two concurrent completions
exactly one wins. The rows themselves open and close with the instance state
(``engine.runtime.human_task_rows``).
"""
from __future__ import annotations

import hmac
from typing import Any

from sqlalchemy import func, literal_column, select, union_all, update

from engine import jobs
from engine.errors import ConflictError, InvalidParamsError, NotFoundError, UnauthorizedError
from engine.forms import validate_result
from engine.jobs.kinds import COMPLETE_TASK
from engine.runtime.human_task_rows import hash_token
from engine.store import task_counts
from engine.store.db import iso, utcnow
from engine.store.models import Conversation, Instance, Task
from engine.store.unit_of_work import UnitOfWork

STATUSES = ("in_progress", "completed", "cancelled")


def cancel_open(uow: UnitOfWork, instance_id: int) -> None:
    """Every open task of an instance becomes cancelled (the instance was cancelled)."""
    uow.execute(update(Task).where(Task.instance_id == instance_id, Task.status == "in_progress")
                       .values(status="cancelled", completed_at=utcnow()))


def _item(task: Task, binding_id: int | None) -> dict[str, Any]:
    return {"task_id": task.id, "instance_id": task.instance_id, "definition_id": task.definition_id,
            "element_id": task.element_id, "name": task.name, "status": task.status,
            "form": task.form or [], "buttons": task.buttons or [], "binding_id": binding_id,
            "variables": task.variables or {}, "created_at": iso(task.created_at),
            "completed_at": iso(task.completed_at), "result": task.result}


def list_tasks(uow: UnitOfWork, tenant_id: int, *, status: str | None, instance_id: int | None, definition_id: int | None,
               page: int, per_page: int, task_id: int | None = None) -> dict[str, Any]:
    """One page of the tenant's tasks, newest (highest id) first, and the total: two statements.

    Built for large tables. The count and the page's ids come from the ``(tenant_id, <filter>, id)``
    indexes (index-only when at most one filter is given); only the page's own rows are read, by
    primary key (a deferred join). A page past the middle is read from the oldest end
    (``total - offset - per_page`` ids skipped instead of ``offset``) and put back newest first, so
    the last page costs what the first does. Without a filter there is no ``(tenant_id, id)``
    index: the ids are merged from the tenant's ``(tenant_id, status, id)`` range of each of the
    ``STATUSES``, which are all the statuses a row can have (this module alone writes them).
    The total comes from ``engine.store.task_counts`` (per tenant, definition and status), or,
    for one instance or one task, from its few index entries; nothing grows with the table.
    ``task_id`` picks one task (by primary key): a page of at most one row, the other filters applied.
    """
    conditions = [Task.tenant_id == tenant_id]
    if task_id is not None:
        conditions.append(Task.id == task_id)
    if status is not None:
        conditions.append(Task.status == status)
    if instance_id is not None:
        # One instance has few tasks, so its range is the one to read. SQLite plans without statistics
        # and, given a status as well, would read the tenant's whole status range instead; likelihood()
        # (SQLite's planner hint, a no-op on the value) tells it the instance is the selective term.
        same_instance = Task.instance_id == instance_id
        if not uow.postgres:
            same_instance = func.likelihood(same_instance, literal_column("0.001"))
        conditions.append(same_instance)
    if definition_id is not None:
        conditions.append(Task.definition_id == definition_id)
    if instance_id is None and task_id is None:
        # The tenant's counters (kept by triggers in the tasks' own transactions): a sum of a few
        # rows, where a count(*) read every matching index entry.
        total = task_counts.total(uow, tenant_id, status=status, definition_id=definition_id)
    else:  # one instance's or one task's: a few index entries
        total = uow.execute(select(func.count()).select_from(Task).where(*conditions)).scalar_one()
    offset = (page - 1) * per_page
    items = []
    if offset < total:
        count = min(per_page, total - offset)
        from_oldest = total - offset - count   # the rows before this page, counted from the oldest end
        merge = status is None and instance_id is None and definition_id is None and task_id is None
        if from_oldest < offset:
            ids = _page_ids(conditions, merge, ascending=True, skip=from_oldest, count=count)
        else:
            ids = _page_ids(conditions, merge, ascending=False, skip=offset, count=count)
        # binding_id: the instance's active conversation, joined in (at most one per instance).
        rows = uow.execute(
            select(Task, Conversation.id).join(ids, Task.id == ids.c.id)
            .outerjoin(Conversation, (Conversation.instance_id == Task.instance_id) & (Conversation.status == "active"))
            .order_by(Task.id.desc())).all()
        items = [_item(task, binding_id) for task, binding_id in rows]
    return {"items": items, "page": page, "per_page": per_page, "total": total}


def _page_ids(conditions: list, merge: bool, *, ascending: bool, skip: int, count: int):
    """A subquery of the page's task ids: ``count`` ids after ``skip`` in id order (the rows come later).

    ``merge``: take the ``skip + count`` first ids of each status's range, then the page of those.
    """
    def ordered(column):
        return column.asc() if ascending else column.desc()

    if not merge:
        return select(Task.id).where(*conditions).order_by(ordered(Task.id)).limit(count).offset(skip).subquery()
    branches = [select(Task.id).where(*conditions, Task.status == one).order_by(ordered(Task.id))
                .limit(skip + count).subquery() for one in STATUSES]
    merged = union_all(*[select(branch.c.id) for branch in branches]).subquery()
    return select(merged.c.id).order_by(ordered(merged.c.id)).limit(count).offset(skip).subquery()


def complete(uow: UnitOfWork, tenant_id: int, task_id: int, result: dict[str, Any] | None) -> dict[str, Any]:
    """``task.complete``: the tenant's task ``task_id`` completes with ``result``."""
    _check_result_type(result)
    task = uow.execute(
        select(Task).where(Task.tenant_id == tenant_id, Task.id == task_id)).scalar_one_or_none()
    if task is None:
        raise NotFoundError(f"Task {task_id} not found.")
    return _complete(uow, task, result)


_NO_HASH = hash_token("")  # compared against when the task has no token, so every miss costs the same


def authorize_callback(uow: UnitOfWork, task_id: int, token: str | None) -> Task:
    """The task a ``POST /tasks/{task_id}/callback`` may complete (checked before its body is read).

    Unknown task: NotFoundError. Missing or wrong token (or a task that has none): UnauthorizedError.
    """
    task = uow.session.get(Task, task_id)
    if task is None:
        raise NotFoundError(f"Task {task_id} not found.")
    presented = hash_token(token) if token else ""
    expected = task.callback_token_hash or _NO_HASH
    if not token or not hmac.compare_digest(presented, expected) or task.callback_token_hash is None:
        raise UnauthorizedError("A valid X-Callback-Token for this task is required.")
    return task


def complete_by_callback(uow: UnitOfWork, task: Task, result: dict[str, Any] | None) -> dict[str, Any]:
    """Complete an authorized task (``authorize_callback``) with exactly the rules of ``task.complete``."""
    _check_result_type(result)
    return _complete(uow, task, result)


def _check_result_type(result: Any) -> None:
    if result is not None and not isinstance(result, dict):
        raise InvalidParamsError("Parameter 'result' must be an object.", data={"field": "result"})


def _complete(uow: UnitOfWork, task: Task, result: dict[str, Any] | None) -> dict[str, Any]:
    """The rules shared by both ways of completing: open task, valid result, running instance, one winner."""
    task_id = task.id
    if task.status != "in_progress":
        raise ConflictError(f"Task {task_id} is {task.status}, not in_progress.")
    checked = validate_result(task.form or [], task.buttons or [], result or {})
    instance_status = uow.execute(
        select(Instance.status).where(Instance.id == task.instance_id)).scalar_one()
    if instance_status != "running":
        raise ConflictError(f"Task {task_id} belongs to a {instance_status} instance.")
    won = uow.execute(
        update(Task).where(Task.id == task.id, Task.status == "in_progress")
        .values(status="completed", result=checked, completed_at=utcnow())).rowcount == 1
    if not won:
        raise ConflictError(f"Task {task_id} was completed by another call.")
    jobs.enqueue(uow, task.tenant_id, COMPLETE_TASK, instance_id=task.instance_id,
                 payload={"spiff_task_id": task.spiff_task_id, "result": checked})
    return {"task_id": task.id, "status": "completed", "instance_id": task.instance_id}
