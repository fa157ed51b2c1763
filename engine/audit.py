"""The audit log of administration (INTERFACE §5.10): every admin call (deploys, channel, key and
webhook changes, deliveries re-sent, secret rotation) is recorded in the call's own unit of work,
with who made it, when, the method and the object it touched, never a secret; ``audit.list``
pages it. Retention removes entries older than ``BATON_AUDIT_RETENTION_DAYS`` (``engine.retention``).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import insert, or_, select

from engine.store.db import iso, utcnow
from engine.store.models import AuditEntry
from engine.store.paging import page_of
from engine.store.unit_of_work import UnitOfWork

_MAX_ID = 255
_entries = AuditEntry.__table__


def record(uow: UnitOfWork, tenant_id: int | None, *, actor_type: str, actor: str, key_id: int | None, method: str,
           target_kind: str | None, target_id: Any, at: datetime | None = None) -> None:
    """Add one entry to the caller's unit of work (it commits with the call, or not at all)."""
    shown = None if target_id is None else str(target_id)[:_MAX_ID]
    uow.run(insert(_entries).values(tenant_id=tenant_id, at=at or utcnow(), actor_type=actor_type[:16],
                                    actor=actor[:200], key_id=key_id, method=method[:64],
                                    target_kind=target_kind, target_id=shown))


def _item(entry: AuditEntry) -> dict[str, Any]:
    return {"audit_id": entry.id, "at": iso(entry.at),
            "actor": {"type": entry.actor_type, "name": entry.actor, "key_id": entry.key_id},
            "method": entry.method,
            "target": None if entry.target_kind is None else {"kind": entry.target_kind, "id": entry.target_id}}


def list_entries(uow: UnitOfWork, tenant_id: int, *, page: int, per_page: int, method: str | None = None,
                 key_id: int | None = None) -> dict[str, Any]:
    """The tenant's entries (and the server-wide ones), newest first, optionally of one method or key."""
    query = select(AuditEntry).where(or_(AuditEntry.tenant_id == tenant_id, AuditEntry.tenant_id.is_(None)))
    if method is not None:
        query = query.where(AuditEntry.method == method)
    if key_id is not None:
        query = query.where(AuditEntry.key_id == key_id)
    return page_of(uow, query, AuditEntry.id, page=page, per_page=per_page, scalars=True, item=_item)
