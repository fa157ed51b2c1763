"""``process.history``: an instance's history as callers read it, oldest first (contract §5.7).
The rows are written by whatever does the thing (``engine.store.history``)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from engine.errors import NotFoundError
from engine.store.db import iso
from engine.store.models import HistoryEvent, Instance
from engine.store.unit_of_work import UnitOfWork


def read(uow: UnitOfWork, tenant_id: int, instance_id: int, *, page: int, per_page: int) -> dict[str, Any]:
    """Page ``page`` of the tenant's instance's history, oldest first (the one list that is: a
    timeline reads forwards); NotFoundError for an unknown or foreign instance."""
    found = uow.execute(select(Instance.id).where(Instance.tenant_id == tenant_id, Instance.id == instance_id)).first()
    if found is None:
        raise NotFoundError(f"Instance {instance_id} not found.")
    where = (HistoryEvent.tenant_id == tenant_id, HistoryEvent.instance_id == instance_id)
    total = uow.execute(select(func.count()).select_from(HistoryEvent).where(*where)).scalar_one()
    rows = uow.execute(select(HistoryEvent.id, HistoryEvent.at, HistoryEvent.kind, HistoryEvent.element_id,
                              HistoryEvent.actor, HistoryEvent.detail)
                       .where(*where).order_by(HistoryEvent.id).limit(per_page).offset((page - 1) * per_page)).all()
    return {"items": [_item(row) for row in rows], "page": page, "per_page": per_page, "total": total}


def _item(row: Any) -> dict[str, Any]:
    return {"event_id": row.id, "at": iso(row.at), "kind": row.kind, "element_id": row.element_id,
            "actor": row.actor, "detail": row.detail or {}}
