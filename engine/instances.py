"""Process instances as callers see them: start, status, cancel, list.

A start writes the instance row and its start job in one transaction and returns at once; a
worker runs it. Every query is scoped to the caller's tenant.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update

from engine import external_tasks, jobs, tasks
from engine.chat import outbox
from engine.errors import ConflictError, InvalidParamsError, NotFoundError
from engine.jobs.kinds import MESSAGE, RETRY, START
from engine.runtime import subscription_rows
from engine.runtime.routing import QUEUED
from engine.store import history, workflows, writes
from engine.store.db import iso, utcnow
from engine.store.models import Definition, Instance, Job
from engine.store.paging import page_of
from engine.telemetry import metrics
from engine.store.unit_of_work import UnitOfWork

STATUSES = ("running", "completed", "cancelled", "failed")
_QUEUED = QUEUED  # a waiting_for entry already claimed by an accepted message


def resolve_definition(uow: UnitOfWork, tenant_id: int, reference: int | str) -> Definition:
    """An integer is that exact definition; a string is a code and means its latest version."""
    query = select(Definition).where(Definition.tenant_id == tenant_id)
    if isinstance(reference, int):
        definition = uow.execute(query.where(Definition.id == reference)).scalar_one_or_none()
    else:
        definition = uow.execute(
            query.where(Definition.code == reference).order_by(Definition.version.desc()).limit(1)
        ).scalar_one_or_none()
    if definition is None:
        raise NotFoundError(f"Definition {reference!r} not found.")
    return definition


def start(uow: UnitOfWork, tenant_id: int, definition: Definition, variables: dict[str, Any] | None) -> dict[str, Any]:
    """Create a running instance and its start job in the unit of work."""
    if variables is not None and not isinstance(variables, dict):
        raise InvalidParamsError("Parameter 'variables' must be an object.")
    default = next((s["element_id"] for s in definition.start_events or [] if s.get("default")), None)
    instance_id = writes.create_instance(uow, tenant_id, definition.id, dict(variables or {}),
                                         START, {"start_event": default} if default else None)
    return {"instance_id": instance_id, "status": "running", "definition_id": definition.id}


def _get(uow: UnitOfWork, tenant_id: int, instance_id: int) -> Instance:
    instance = uow.execute(
        select(Instance).where(Instance.tenant_id == tenant_id, Instance.id == instance_id)
    ).scalar_one_or_none()
    if instance is None:
        raise NotFoundError(f"Instance {instance_id} not found.")
    return instance


def status(uow: UnitOfWork, tenant_id: int, instance_id: int) -> dict[str, Any]:
    instance = _get(uow, tenant_id, instance_id)
    definition = uow.session.get(Definition, instance.definition_id)
    variables = instance.variables or {}
    if instance.output_keys:
        variables = {key: variables[key] for key in instance.output_keys if key in variables}
    return {
        "instance_id": instance.id,
        "status": instance.status,
        "definition_id": instance.definition_id,
        "code": definition.code,
        "version": definition.version,
        "variables": variables,
        "started_at": iso(instance.started_at),
        "completed_at": iso(instance.completed_at),
        "error": instance.error if instance.status == "failed" else None,
        "waiting_for": shown_waiting_for(instance.waiting_for) if instance.status == "running" else [],
    }


def shown_waiting_for(entries: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """An instance's ``waiting_for`` as callers see it: without the engine's claim marks."""
    return [{k: v for k, v in entry.items() if k != _QUEUED} for entry in entries or []]


def cancel(uow: UnitOfWork, tenant_id: int, instance_id: int) -> dict[str, Any]:
    """Cancel a running instance: its pending jobs go with it; a saving worker loses its race."""
    instance = _get(uow, tenant_id, instance_id)
    if instance.status in ("completed", "failed"):
        raise ConflictError(f"Instance {instance_id} is {instance.status} and cannot be cancelled.")
    if instance.status == "running":
        # Locks in the order an advance's save takes them (its job, then the instance): the
        # other order deadlocked on PostgreSQL with a save in flight, and the cancel failed.
        uow.execute(select(Job.id).where(Job.instance_id == instance.id).order_by(Job.id).with_for_update())
        cancelled = uow.execute(
            update(Instance).where(Instance.id == instance.id, Instance.status == "running")
            .values(status="cancelled", completed_at=utcnow(), waiting_for=[],
                    revision=Instance.revision + 1))
        if cancelled.rowcount != 1:  # it ended meanwhile (a save won the race): answer as for an ended one
            uow.session.refresh(instance)
            return cancel(uow, tenant_id, instance_id)
        uow.execute(delete(Job).where(Job.instance_id == instance.id))
        tasks.cancel_open(uow, instance.id)
        external_tasks.cancel_open(uow, instance.id)
        subscription_rows.drop(uow, instance.id)
        outbox.close_for_instance(uow, instance.id)
        history.record(uow, tenant_id=tenant_id, instance_id=instance.id, kind="cancelled")
        code = workflows.definition_code(uow, instance.definition_id)
        uow.after_commit(lambda: metrics.INSTANCES_ENDED.labels(code, "cancelled").inc())
    return {"instance_id": instance.id, "status": "cancelled"}


def list_instances(uow: UnitOfWork, tenant_id: int, *, status: str | None, definition_id: int | None,
                   page: int, per_page: int) -> dict[str, Any]:
    conditions = [Instance.tenant_id == tenant_id]
    if status is not None:
        conditions.append(Instance.status == status)
    if definition_id is not None:
        conditions.append(Instance.definition_id == definition_id)
    return page_of(uow, select(*LIST_COLUMNS).where(*conditions), Instance.id,
                   page=page, per_page=per_page, item=list_item)


# The columns of an instance in a list (process.list, definition.instances_at) and its item.
LIST_COLUMNS = (Instance.id, Instance.status, Instance.definition_id, Instance.started_at,
                Instance.completed_at, Instance.waiting_for, Instance.error)


def list_item(row: Any) -> dict[str, Any]:
    error = row.error if isinstance(row.error, dict) else {}
    return {"instance_id": row.id, "status": row.status, "definition_id": row.definition_id,
            "started_at": iso(row.started_at), "completed_at": iso(row.completed_at),
            "waiting_at": waiting_elements(row.waiting_for) if row.status == "running" else [],
            "failed_at": error.get("element_id") if row.status == "failed" else None}


# Entries of ``waiting_for`` that only describe the structure around a wait (docs/api.md).
_STRUCTURE_KINDS = frozenset({"subProcess", "callActivity", "standardLoopTask",
                              "parallelInstances", "sequentialInstances"})


def waiting_elements(waiting_for: list[dict[str, Any]] | None) -> list[str]:
    """The elements an instance itself waits at (a list's "where"), without the structure around them."""
    seen: dict[str, None] = {}
    for entry in waiting_for if isinstance(waiting_for, list) else []:
        if isinstance(entry, dict) and entry.get("kind") not in _STRUCTURE_KINDS and entry.get("element_id"):
            seen.setdefault(str(entry["element_id"]), None)
    return list(seen)


def send_message(uow: UnitOfWork, tenant_id: int, instance_id: int, message: str,
                 variables: dict[str, Any] | None) -> dict[str, Any]:
    """Queue a named message for an instance that waits for it; a ``conflict`` when none waits."""
    instance = _get(uow, tenant_id, instance_id)
    if instance.status != "running":
        raise ConflictError(f"Instance {instance_id} is {instance.status}; it waits for no message.")
    entries = [dict(entry) for entry in instance.waiting_for or []]
    waiting = next((entry for entry in entries if not entry.get(_QUEUED) and (
        message == entry.get("message") or message in entry.get("messages", []))), None)
    if waiting is None:
        raise ConflictError(f"Instance {instance_id} is not waiting for message '{message}'.")
    # Claim the waiting element for this message (compare-and-swap on the revision), so that a
    # second message sent before the first is applied is refused rather than accepted and dropped.
    waiting[_QUEUED] = True
    claimed = uow.execute(
        update(Instance).where(Instance.id == instance.id, Instance.revision == instance.revision)
        .values(waiting_for=entries, revision=Instance.revision + 1)).rowcount == 1
    if not claimed:
        raise ConflictError(f"Instance {instance_id} changed while the message arrived; send it again.")
    jobs.enqueue(uow, tenant_id, MESSAGE, instance_id=instance.id,
                 payload={"message": message, "variables": variables or {}})
    history.record(uow, tenant_id=tenant_id, instance_id=instance.id, kind="message_received",
                   element_id=waiting.get("element_id"), detail={"message": message})
    return {"instance_id": instance.id, "delivered": True}


def retry(uow: UnitOfWork, tenant_id: int, instance_id: int, variables: dict[str, Any] | None) -> dict[str, Any]:
    """Resume a failed instance at the element that failed, after merging ``variables``."""
    instance = _get(uow, tenant_id, instance_id)
    if instance.status != "failed":
        raise ConflictError(f"Instance {instance_id} is {instance.status}; only failed instances can be retried.")
    error = instance.error if isinstance(instance.error, dict) else {}
    resumed = uow.execute(
        update(Instance).where(Instance.id == instance.id, Instance.status == "failed")
        .values(status="running", error=None, completed_at=None, revision=Instance.revision + 1))
    if resumed.rowcount != 1:
        raise ConflictError(f"Instance {instance_id} was retried by another call.")
    payload = {"variables": variables or {}}
    if instance.state is None:  # it failed before its first save: begin again where its start job said
        held_start = uow.execute(select(Job.payload).where(
            Job.instance_id == instance.id, Job.kind == START, Job.run_at == jobs.HELD_UNTIL)).scalars().first()
        payload.update({k: v for k, v in (held_start or {}).items() if k in ("start_event", "trigger")})
    jobs.enqueue(uow, tenant_id, RETRY, instance_id=instance.id, payload=payload)
    jobs.requeue_held(uow, instance.id)
    history.record(uow, tenant_id=tenant_id, instance_id=instance.id, kind="retried",
                   element_id=error.get("element_id"), detail={"set": sorted(variables or {})})  # what an internal failure kept aside runs after the retry
    return {"instance_id": instance.id, "status": "running"}
