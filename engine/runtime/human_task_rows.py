"""Human-task rows, written with the instance state (a contributor to each advance,
``HumanTaskRows``): opened when a user/manual task becomes ready, cancelled when it is no longer,
and a headless task's ``task.created`` event (docs/api.md, "Headless tasks": why the event is
signed with the task's own callback token).
"""
from __future__ import annotations

import hashlib
import logging
import secrets

from SpiffWorkflow.bpmn.specs.mixins.manual_task import ManualTask
from SpiffWorkflow.bpmn.specs.mixins.user_task import UserTask
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState
from sqlalchemy import select, update

from bpmn import any_task_spec
from engine.jobs.kinds import REPAIR
from engine.outbound import delivery
from engine.runtime.task_assignment import add_audience, audience, evaluate_assignment, form_id_for
from engine.store.db import utcnow
from engine.store.models import Task
from engine.store.unit_of_work import UnitOfWork

log = logging.getLogger("baton.tasks")

TASK_CREATED = "task.created"
CRM_WEBHOOK = "crm_webhook"


def may_open_tasks(specs: tuple) -> bool:
    """Whether task rows can exist for this process at all (else the save skips the sync)."""
    return any_task_spec(is_human, *specs)


def is_human(task_spec) -> bool:
    return isinstance(task_spec, (UserTask, ManualTask))


class HumanTaskRows:
    """Contributor (``engine.runtime.advance``): the task rows of a process that has human tasks."""

    def __init__(self, public_url: str):
        self.public_url = public_url

    def contribute(self, advance):
        if not may_open_tasks(advance.specs):
            return None
        workflow = advance.outcome.workflow if advance.running else None
        reopen = ("cancelled", "completed") if advance.job.kind == REPAIR else ("cancelled",)
        return lambda uow: sync(uow, advance.tenant_id, advance.instance_id, advance.row.definition_id, workflow,
                                public_url=self.public_url, reopen=reopen)


def sync(uow: UnitOfWork, tenant_id: int, instance_id: int, definition_id: int, workflow: BpmnWorkflow | None, *,
         public_url: str, reopen: tuple[str, ...] = ("cancelled",)) -> None:
    """In the runner's save transaction: open a row for every ready human task; cancel open rows
    whose task is no longer ready (``workflow`` None: the instance ended); reopen the rows in a
    ``reopen`` status whose task is ready again (after ``process.retry``: cancelled by the failure;
    after ``process.rewind``: completed too, the task is back with its ``task_id``)."""
    ready = {}
    if workflow is not None:
        ready = {str(t.id): t for t in workflow.get_tasks(state=TaskState.READY) if is_human(t.task_spec)}
    known = dict(uow.execute(
        select(Task.spiff_task_id, Task.status).where(Task.instance_id == instance_id)).all())
    gone = [spiff_id for spiff_id, status in known.items() if status == "in_progress" and spiff_id not in ready]
    if gone:
        uow.execute(update(Task).where(Task.instance_id == instance_id, Task.spiff_task_id.in_(gone))
                           .values(status="cancelled", completed_at=utcnow()))
    reopened = [spiff_id for spiff_id in ready if known.get(spiff_id) in reopen]
    if reopened:
        uow.execute(update(Task).where(Task.instance_id == instance_id, Task.spiff_task_id.in_(reopened))
                           .values(status="in_progress", completed_at=None, result=None))
    opened, forms, now = [], {}, utcnow()
    for spiff_id, task in ready.items():
        if spiff_id in known:
            continue
        extensions = task.task_spec.extensions
        variables = dict(task.data)
        assignment = evaluate_assignment(extensions.get("assignment") or {}, variables, now,
                                         f"instance {instance_id} task {task.task_spec.bpmn_id}")
        row = Task(
            tenant_id=tenant_id, instance_id=instance_id, definition_id=definition_id,
            spiff_task_id=spiff_id, element_id=task.task_spec.bpmn_id,
            name=task.task_spec.bpmn_name, status="in_progress",
            form=extensions.get("form") or [], buttons=extensions.get("buttons") or [],
            variables=variables, created_at=now,
            form_id=form_id_for(uow, tenant_id, definition_id, extensions.get("form_ref"), forms),
            **assignment.columns())
        uow.session.add(row)
        opened.append(row)
        crm_webhook = ((extensions.get("properties") or {}).get(CRM_WEBHOOK) or "").strip()
        if crm_webhook:
            _announce(uow, row, crm_webhook, public_url)
    if opened and any(row.assignee or row.candidate_users or row.candidate_groups for row in opened):
        uow.session.flush()  # the rows' ids
        add_audience(uow, [{"task_id": row.id, "tenant_id": tenant_id, "status": row.status, "who": who}
                           for row in opened
                           for who in audience(row.assignee, row.candidate_users, row.candidate_groups)])


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def callback_url(public_url: str, task_id: int) -> str:
    return f"{public_url.rstrip('/')}/tasks/{task_id}/callback"


def _announce(uow: UnitOfWork, row: Task, url: str, public_url: str) -> None:
    """Give a headless task its callback token and queue its ``task.created`` event (same transaction)."""
    token = secrets.token_urlsafe(32)
    row.callback_token_hash = hash_token(token)
    uow.session.flush()  # the row's id, for the event and the callback URL
    payload = {"event": TASK_CREATED, "task_id": row.id, "instance_id": row.instance_id, "name": row.name,
               "form": row.form or [], "buttons": row.buttons or [], "variables": row.variables or {},
               "callback_url": callback_url(public_url, row.id),
               "callback_token": token}
    try:
        delivery.queue(uow, row.tenant_id, url=url, payload=payload, secret=token,
                       ordering_key=f"crm:instance:{row.instance_id}", channel_id=None, event=TASK_CREATED)
    except ValueError as exc:  # a URL too long for the column, or variables JSON cannot carry
        log.warning("task %s: task.created for %s not queued: %s", row.id, url, exc)
