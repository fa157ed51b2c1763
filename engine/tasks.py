"""Human tasks: rows that open and close with the instance state, listing, and completion.

``sync`` runs inside the runner's save transaction, so a task row appears or closes atomically
with the state that caused it. ``complete`` marks the row completed and enqueues the job that
continues the instance in one transaction; of two concurrent completions exactly one wins.

**Headless tasks (INTERFACE.md §7).** A human task whose element has ``crm_webhook`` gets, when its
row opens, a fresh callback token (32 random bytes, URL-safe) and a ``task.created`` delivery to
that URL, queued in the same save transaction (``engine.delivery``: durable, retried, in order per
instance). Only the token's SHA-256 is kept on the row; the token itself appears only in the event
(and so in the delivery's stored body until it is sent). ``complete_by_callback`` checks a
presented token against the hash in constant time, then applies exactly the rules of
``task.complete`` (one shared ``_complete``).

*Signing.* The event is signed (``X-Baton-Signature``, §4.3) with the task's own callback token.
The contract defines no per-tenant or per-task secret the CRM could know in advance, and putting one
in the BPMN file would leak it to everyone who can read the model. What this signature proves is
therefore limited, and we say so plainly: it proves the body was not altered in transit *relative
to the token it carries*; it does **not** prove on its own that Baton sent it (a forger can pick a
token and sign with it). Origin is proven on the way back: a forged event carries a token Baton
never issued, so the CRM's callback with it is refused (401/404). A CRM should therefore accept
``callback_url`` only under the Baton base URL it was configured with, and treat a task as real only
once a callback (or ``task.complete``) succeeds.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from typing import Any

from SpiffWorkflow.bpmn.specs.mixins.manual_task import ManualTask
from SpiffWorkflow.bpmn.specs.mixins.user_task import UserTask
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState
from sqlalchemy import func, literal_column, select, union_all, update
from sqlalchemy.orm import aliased

from flask import current_app

from engine import delivery, jobs
from engine.db import db, is_postgres, iso, utcnow
from engine.errors import ConflictError, InvalidParamsError, NotFoundError, UnauthorizedError
from engine.forms import validate_result
from engine.models import Conversation, Instance, Task

log = logging.getLogger("baton.tasks")

COMPLETE_TASK = "complete_task"
STATUSES = ("in_progress", "completed", "cancelled")
TASK_CREATED = "task.created"
CRM_WEBHOOK = "crm_webhook"


def is_human(task_spec) -> bool:
    return isinstance(task_spec, (UserTask, ManualTask))


def sync(tenant_id: int, instance_id: int, definition_id: int, workflow: BpmnWorkflow | None) -> None:
    """Open a row for every ready human task; cancel open rows whose task is no longer ready."""
    ready = {}
    if workflow is not None:
        ready = {str(t.id): t for t in workflow.get_tasks(state=TaskState.READY) if is_human(t.task_spec)}
    known = dict(db.session.execute(
        select(Task.spiff_task_id, Task.status).where(Task.instance_id == instance_id)).all())
    gone = [spiff_id for spiff_id, status in known.items() if status == "in_progress" and spiff_id not in ready]
    if gone:
        db.session.execute(update(Task).where(Task.instance_id == instance_id, Task.spiff_task_id.in_(gone))
                           .values(status="cancelled", completed_at=utcnow()))
    reopened = [spiff_id for spiff_id in ready if known.get(spiff_id) == "cancelled"]
    if reopened:  # ready again after process.retry: the failure had cancelled the row
        db.session.execute(update(Task).where(Task.instance_id == instance_id, Task.spiff_task_id.in_(reopened))
                           .values(status="in_progress", completed_at=None))
    for spiff_id, task in ready.items():
        if spiff_id in known:
            continue
        extensions = task.task_spec.extensions
        row = Task(
            tenant_id=tenant_id, instance_id=instance_id, definition_id=definition_id,
            spiff_task_id=spiff_id, element_id=task.task_spec.bpmn_id,
            name=task.task_spec.bpmn_name, status="in_progress",
            form=extensions.get("form") or [], buttons=extensions.get("buttons") or [],
            variables=dict(task.data))
        db.session.add(row)
        crm_webhook = ((extensions.get("properties") or {}).get(CRM_WEBHOOK) or "").strip()
        if crm_webhook:
            _announce(row, crm_webhook)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def callback_url(public_url: str, task_id: int) -> str:
    return f"{public_url.rstrip('/')}/tasks/{task_id}/callback"


def _announce(row: Task, url: str) -> None:
    """Give a headless task its callback token and queue its ``task.created`` event (same transaction)."""
    token = secrets.token_urlsafe(32)
    row.callback_token_hash = hash_token(token)
    db.session.flush()  # the row's id, for the event and the callback URL
    payload = {"event": TASK_CREATED, "task_id": row.id, "instance_id": row.instance_id, "name": row.name,
               "form": row.form or [], "buttons": row.buttons or [], "variables": row.variables or {},
               "callback_url": callback_url(current_app.extensions["baton"].settings.public_url, row.id),
               "callback_token": token}
    try:
        delivery.queue(row.tenant_id, url=url, payload=payload, secret=token,
                       ordering_key=f"crm:instance:{row.instance_id}", channel_id=None, event=TASK_CREATED)
    except ValueError as exc:  # a URL too long for the column, or variables JSON cannot carry
        log.warning("task %s: task.created for %s not queued: %s", row.id, url, exc)


def cancel_open(instance_id: int) -> None:
    """Every open task of an instance becomes cancelled (the instance was cancelled)."""
    db.session.execute(update(Task).where(Task.instance_id == instance_id, Task.status == "in_progress")
                       .values(status="cancelled", completed_at=utcnow()))


def _item(task: Task, binding_id: int | None) -> dict[str, Any]:
    return {"task_id": task.id, "instance_id": task.instance_id, "definition_id": task.definition_id,
            "element_id": task.element_id, "name": task.name, "status": task.status,
            "form": task.form or [], "buttons": task.buttons or [], "binding_id": binding_id,
            "variables": task.variables or {}, "created_at": iso(task.created_at),
            "completed_at": iso(task.completed_at), "result": task.result}


def list_tasks(tenant_id: int, *, status: str | None, instance_id: int | None, definition_id: int | None,
               page: int, per_page: int) -> dict[str, Any]:
    """One page of the tenant's tasks, newest (highest id) first, and the total: two statements.

    Built for large tables. The count and the page's ids come from the ``(tenant_id, <filter>, id)``
    indexes (index-only when at most one filter is given); only the page's own rows are read, by
    primary key (a deferred join). A page past the middle is read from the oldest end
    (``total - offset - per_page`` ids skipped instead of ``offset``) and put back newest first, so
    the last page costs what the first does. Without a filter there is no ``(tenant_id, id)``
    index: the ids are merged from the tenant's ``(tenant_id, status, id)`` range of each of the
    ``STATUSES``, which are all the statuses a row can have (this module alone writes them).
    The count is linear in the matching index entries; nothing else grows with the table.
    """
    conditions = [Task.tenant_id == tenant_id]
    if status is not None:
        conditions.append(Task.status == status)
    if instance_id is not None:
        # One instance has few tasks, so its range is the one to read. SQLite plans without statistics
        # and, given a status as well, would read the tenant's whole status range instead; likelihood()
        # (SQLite's planner hint, a no-op on the value) tells it the instance is the selective term.
        same_instance = Task.instance_id == instance_id
        if not is_postgres():
            same_instance = func.likelihood(same_instance, literal_column("0.001"))
        conditions.append(same_instance)
    if definition_id is not None:
        conditions.append(Task.definition_id == definition_id)
    counting = select(func.count()).select_from(Task).where(*conditions)
    if status is not None and definition_id is not None and instance_id is None:
        # No index holds both columns: count the ids that the two index ranges share (index-only on
        # both sides) rather than reading every row of one range to check the other column.
        by_status = aliased(Task)
        counting = (select(func.count()).select_from(Task).join(by_status, by_status.id == Task.id)
                    .where(Task.tenant_id == tenant_id, Task.definition_id == definition_id,
                           by_status.tenant_id == tenant_id, by_status.status == status))
    total = db.session.execute(counting).scalar_one()
    offset = (page - 1) * per_page
    items = []
    if offset < total:
        count = min(per_page, total - offset)
        from_oldest = total - offset - count   # the rows before this page, counted from the oldest end
        merge = status is None and instance_id is None and definition_id is None
        if from_oldest < offset:
            ids = _page_ids(conditions, merge, ascending=True, skip=from_oldest, count=count)
        else:
            ids = _page_ids(conditions, merge, ascending=False, skip=offset, count=count)
        # binding_id: the instance's active conversation, joined in (at most one per instance).
        rows = db.session.execute(
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


def complete(tenant_id: int, task_id: int, result: dict[str, Any] | None) -> dict[str, Any]:
    """``task.complete``: the tenant's task ``task_id`` completes with ``result``."""
    _check_result_type(result)
    task = db.session.execute(
        select(Task).where(Task.tenant_id == tenant_id, Task.id == task_id)).scalar_one_or_none()
    if task is None:
        raise NotFoundError(f"Task {task_id} not found.")
    return _complete(task, result)


_NO_HASH = hash_token("")  # compared against when the task has no token, so every miss costs the same


def authorize_callback(task_id: int, token: str | None) -> Task:
    """The task a ``POST /tasks/{task_id}/callback`` may complete (checked before its body is read).

    Unknown task: NotFoundError. Missing or wrong token (or a task that has none): UnauthorizedError.
    """
    task = db.session.get(Task, task_id)
    if task is None:
        raise NotFoundError(f"Task {task_id} not found.")
    presented = hash_token(token) if token else ""
    expected = task.callback_token_hash or _NO_HASH
    if not token or not hmac.compare_digest(presented, expected) or task.callback_token_hash is None:
        raise UnauthorizedError("A valid X-Callback-Token for this task is required.")
    return task


def complete_by_callback(task: Task, result: dict[str, Any] | None) -> dict[str, Any]:
    """Complete an authorized task (``authorize_callback``) with exactly the rules of ``task.complete``."""
    _check_result_type(result)
    return _complete(task, result)


def _check_result_type(result: Any) -> None:
    if result is not None and not isinstance(result, dict):
        raise InvalidParamsError("Parameter 'result' must be an object.", data={"field": "result"})


def _complete(task: Task, result: dict[str, Any] | None) -> dict[str, Any]:
    """The rules shared by both ways of completing: open task, valid result, running instance, one winner."""
    task_id = task.id
    if task.status != "in_progress":
        raise ConflictError(f"Task {task_id} is {task.status}, not in_progress.")
    checked = validate_result(task.form or [], task.buttons or [], result or {})
    instance_status = db.session.execute(
        select(Instance.status).where(Instance.id == task.instance_id)).scalar_one()
    if instance_status != "running":
        raise ConflictError(f"Task {task_id} belongs to a {instance_status} instance.")
    won = db.session.execute(
        update(Task).where(Task.id == task.id, Task.status == "in_progress")
        .values(status="completed", result=checked, completed_at=utcnow())).rowcount == 1
    if not won:
        db.session.rollback()
        raise ConflictError(f"Task {task_id} was completed by another call.")
    jobs.enqueue(task.tenant_id, COMPLETE_TASK, instance_id=task.instance_id,
                 payload={"spiff_task_id": task.spiff_task_id, "result": checked})
    db.session.commit()
    return {"task_id": task.id, "status": "completed", "instance_id": task.instance_id}
