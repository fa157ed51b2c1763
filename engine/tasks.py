"""Human tasks as callers see them: ``task.list``, ``task.complete`` and the CRM callback.

Both ways of completing apply one set of rules (``_complete``): the row is marked completed and
the job that continues the instance is queued in one transaction; of two concurrent completions
exactly one wins. The rows themselves open and close with the instance state
(``engine.runtime.human_task_rows``).
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from sqlalchemy import distinct, func, literal_column, select, union, union_all, update

from engine import jobs
from engine.errors import ConflictError, InvalidParamsError, NotFoundError, UnauthorizedError
from engine.form_schemas import check_result
from engine.forms import validate_result
from engine.jobs.kinds import COMPLETE_TASK
from engine.runtime.human_task_rows import hash_token
from engine.store import history, task_counts
from engine.store.db import iso, utcnow
from engine.store.models import Conversation, Form, Instance, Task, TaskAudience
from engine.store.unit_of_work import UnitOfWork

STATUSES = ("in_progress", "completed", "cancelled")
ASSIGN_PERMISSION = "task.assign"


def cancel_open(uow: UnitOfWork, instance_id: int) -> None:
    """Every open task of an instance becomes cancelled (the instance was cancelled)."""
    uow.execute(update(Task).where(Task.instance_id == instance_id, Task.status == "in_progress")
                       .values(status="cancelled", completed_at=utcnow()))


def _item(task: Task, binding_id: int | None, form_schema: dict | None) -> dict[str, Any]:
    return {"task_id": task.id, "instance_id": task.instance_id, "definition_id": task.definition_id,
            "element_id": task.element_id, "name": task.name, "status": task.status,
            "form": task.form or [], "buttons": task.buttons or [], "binding_id": binding_id,
            "variables": task.variables or {}, "created_at": iso(task.created_at),
            "completed_at": iso(task.completed_at), "result": task.result,
            "assignee": task.assignee, "candidate_users": task.candidate_users or [],
            "candidate_groups": task.candidate_groups or [], "due_at": iso(task.due_at),
            "follow_up_at": iso(task.follow_up_at), "priority": task.priority, "form_schema": form_schema}


ANYONE = object()  # ``assignee`` not given (None: unassigned tasks)
SORTS = {  # sort -> the key columns, each (column, descending); the last one is the id (stable)
    "created": ((Task.id, True),),
    "due": ((Task.due_order, False), (Task.id, False)),  # earliest due first, undated last, oldest first
    "priority": ((Task.priority, True), (Task.id, True)),  # highest first, newest first
}


@dataclass(frozen=True)
class TaskFilter:
    """``task.list``'s filters. ``audience``: the ``who`` names (``engine.runtime.task_assignment``)
    of ``mine`` or ``candidate_group``, which select open tasks only."""

    status: str | None = None
    instance_id: int | None = None
    definition_id: int | None = None
    task_id: int | None = None
    assignee: Any = ANYONE
    audience: tuple[str, ...] | None = None
    overdue: bool = False
    sort: str = "created"


def list_tasks(uow: UnitOfWork, tenant_id: int, *, status: str | None = None, instance_id: int | None = None,
               definition_id: int | None = None, page: int, per_page: int, task_id: int | None = None,
               where: TaskFilter | None = None) -> dict[str, Any]:
    """One page of the tenant's tasks (newest first, or by ``where.sort``) and the total, in a few statements.

    Built for large tables. The count and the page's ids come from indexes that hold the filter and
    the order (index-only when at most one filter is given); only the page's own rows are read, by
    primary key (a deferred join). A page past the middle is read from the other end (``total -
    offset - per_page`` ids skipped instead of ``offset``) and put back in order, so the last page
    costs what the first does. A range that holds every status but is ordered within each (no
    filter; ``assignee``) is merged from the range of each of the ``STATUSES``, which are all the
    statuses a row can have. ``mine`` and ``candidate_group`` read the ``task_audience`` index. The
    total without a filter (or by status or definition) comes from ``engine.store.task_counts``;
    otherwise from the matching index entries. ``task_id`` picks one task (by primary key).
    """
    where = where or TaskFilter(status=status, instance_id=instance_id, definition_id=definition_id, task_id=task_id)
    conditions, fast = _conditions(uow, tenant_id, where)
    keys = SORTS[where.sort]
    plain = fast == "counted"
    if plain:
        # The tenant's counters (kept by triggers in the tasks' own transactions): a sum of a few
        # rows, where a count(*) read every matching index entry.
        total = task_counts.total(uow, tenant_id, status=where.status, definition_id=where.definition_id)
    elif fast == "audience":
        total = uow.execute(select(func.count(distinct(TaskAudience.task_id))).where(
            *_audience_conditions(tenant_id, where.audience))).scalar_one()
    else:  # a few index entries (one instance, one task), or the range of one filter's index
        total = uow.execute(select(func.count()).select_from(Task).where(*conditions)).scalar_one()
    offset = (page - 1) * per_page
    items = []
    if offset < total:
        count = min(per_page, total - offset)
        from_end = total - offset - count   # the rows after this page, counted from the other end
        reverse = from_end < offset
        skip = from_end if reverse else offset
        if fast == "audience" and where.sort == "created":
            ids = _audience_page_ids(tenant_id, where.audience, reverse=reverse, skip=skip, count=count)
        else:
            merge = where.status is None and fast in ("counted", "assignee") and where.definition_id is None
            ids = _page_ids(conditions, keys, merge, reverse=reverse, skip=skip, count=count)
        # binding_id: the instance's active conversation, joined in (at most one per instance).
        rows = uow.execute(
            select(Task, Conversation.id, Form.schema).join(ids, Task.id == ids.c.id)
            .outerjoin(Conversation, (Conversation.instance_id == Task.instance_id) & (Conversation.status == "active"))
            .outerjoin(Form, Form.id == Task.form_id)
            .order_by(*[column.desc() if descending else column.asc() for column, descending in keys])).all()
        items = [_item(task, binding_id, schema) for task, binding_id, schema in rows]
    return {"items": items, "page": page, "per_page": per_page, "total": total}


def _conditions(uow: UnitOfWork, tenant_id: int, where: TaskFilter) -> tuple[list, str | None]:
    """The WHERE of a listing, and which fast path it may take: ``counted`` (the task counters
    hold its total), ``audience`` (``mine``/``candidate_group`` alone), ``assignee`` (that index
    alone), or None."""
    conditions = [Task.tenant_id == tenant_id]
    if where.task_id is not None:
        conditions.append(Task.id == where.task_id)
    if where.status is not None:
        conditions.append(Task.status == where.status)
    if where.instance_id is not None:
        # One instance has few tasks, so its range is the one to read. SQLite plans without statistics
        # and, given a status as well, would read the tenant's whole status range instead; likelihood()
        # (SQLite's planner hint, a no-op on the value) tells it the instance is the selective term.
        same_instance = Task.instance_id == where.instance_id
        if not uow.postgres:
            same_instance = func.likelihood(same_instance, literal_column("0.001"))
        conditions.append(same_instance)
    if where.definition_id is not None:
        conditions.append(Task.definition_id == where.definition_id)
    if where.assignee is not ANYONE:
        conditions.append(Task.assignee.is_(None) if where.assignee is None else Task.assignee == where.assignee)
    if where.overdue:
        conditions += [Task.status == "in_progress", Task.due_order < utcnow()]
    if where.audience is not None:
        conditions += [Task.status == "in_progress", Task.id.in_(
            select(TaskAudience.task_id).where(*_audience_conditions(tenant_id, where.audience)))]
    one_range = where.instance_id is None and where.task_id is None and not where.overdue
    if one_range and where.audience is None and where.assignee is ANYONE:
        return conditions, "counted"
    if one_range and where.definition_id is None and where.assignee is ANYONE and where.audience is not None:
        return conditions, "audience"
    if one_range and where.definition_id is None and where.audience is None:
        return conditions, "assignee"
    return conditions, None


def _audience_conditions(tenant_id: int, who: tuple[str, ...]) -> list:
    return [TaskAudience.tenant_id == tenant_id, TaskAudience.who.in_(who), TaskAudience.status == "in_progress"]


def _page_ids(conditions: list, keys: tuple, merge: bool, *, reverse: bool, skip: int, count: int):
    """A subquery of the page's task ids: ``count`` ids after ``skip`` in ``keys`` order (reversed:
    from the other end); the rows come later.

    ``merge``: take the ``skip + count`` first of each status's range, then the page of those.
    """
    def ordered(columns):
        return [column.desc() if descending != reverse else column.asc()
                for column, (_, descending) in zip(columns, keys)]

    if not merge:
        return (select(Task.id).where(*conditions).order_by(*ordered([c for c, _ in keys]))
                .limit(count).offset(skip).subquery())
    labelled = [column.label(f"k{i}") for i, (column, _) in enumerate(keys[:-1])]
    branches = [select(Task.id.label("id"), *labelled).where(*conditions, Task.status == one)
                .order_by(*ordered([c for c, _ in keys])).limit(skip + count).subquery() for one in STATUSES]
    merged = union_all(*[select(branch) for branch in branches]).subquery()
    order = [merged.c[f"k{i}"] for i in range(len(keys) - 1)] + [merged.c.id]
    return select(merged.c.id).order_by(*ordered(order)).limit(count).offset(skip).subquery()


def _audience_page_ids(tenant_id: int, who: tuple[str, ...], *, reverse: bool, skip: int, count: int):
    """Newest first from the ``task_audience`` index: one name's range, or the first ``skip + count``
    of each name's range merged (a task a user sees through two names counts once)."""
    def ordered(column):
        return column.asc() if reverse else column.desc()

    if len(who) == 1:
        return (select(TaskAudience.task_id.label("id")).where(*_audience_conditions(tenant_id, who))
                .order_by(ordered(TaskAudience.task_id)).limit(count).offset(skip).subquery())
    branches = [select(TaskAudience.task_id.label("id")).where(*_audience_conditions(tenant_id, (one,)))
                .order_by(ordered(TaskAudience.task_id)).limit(skip + count).subquery() for one in who]
    merged = union(*[select(branch.c.id) for branch in branches]).subquery()
    return select(merged.c.id).order_by(ordered(merged.c.id)).limit(count).offset(skip).subquery()


def complete(uow: UnitOfWork, tenant_id: int, task_id: int, result: dict[str, Any] | None,
             principal=None) -> dict[str, Any]:
    """``task.complete``: the tenant's task ``task_id`` completes with ``result``. A task another
    user holds is a ConflictError unless ``principal`` (the calling key) may assign tasks."""
    _check_result_type(result)
    task = uow.execute(
        select(Task).where(Task.tenant_id == tenant_id, Task.id == task_id)).scalar_one_or_none()
    if task is None:
        raise NotFoundError(f"Task {task_id} not found.")
    if principal is not None and task.status == "in_progress" and task.assignee is not None \
            and task.assignee != principal.user and not principal.allows(ASSIGN_PERMISSION):
        raise ConflictError(f"Task {task_id} is held by '{task.assignee}': only they, or a key with "
                            f"'{ASSIGN_PERMISSION}', may complete it.")
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
    if task.form_id is not None:
        schema = uow.execute(select(Form.schema).where(Form.id == task.form_id)).scalar_one()
        checked = check_result(schema, checked, task.variables or {}, decision=bool(task.buttons))
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
    history.record(uow, tenant_id=task.tenant_id, instance_id=task.instance_id, kind="task_completed",
                   element_id=task.element_id, detail={"task_id": task.id, "result": sorted(checked)})
    return {"task_id": task.id, "status": "completed", "instance_id": task.instance_id}
