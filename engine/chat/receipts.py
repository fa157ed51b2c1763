"""Deduplication of messenger calls: the messenger's own id of each item taken, kept durably.

Messengers retry a call whose answer was slow or not 2xx, and the same item then arrives again.
``take`` records the item's id in the caller's transaction (a unique constraint on channel and id),
so the item and what it caused commit together or not at all; a second ``take`` of the same id,
even from a concurrent request, finds it (``taken``) or fails on the constraint and is retried.
"""
from __future__ import annotations

from sqlalchemy import bindparam, insert, select

from engine.store.db import utcnow
from engine.store.models import InboundReceipt
from engine.store.unit_of_work import UnitOfWork

MAX_ID = 300   # the column's size; longer ids (none are) are cut, keeping their end, which varies most


_TAKEN = select(InboundReceipt.id).where(InboundReceipt.channel_id == bindparam("channel_id"),
                                         InboundReceipt.external_id == bindparam("external_id"))
_TAKE = insert(InboundReceipt.__table__).values(
    tenant_id=bindparam("tenant_id"), channel_id=bindparam("channel_id"), external_id=bindparam("external_id"),
    kind=bindparam("kind"), created_at=bindparam("now"))


def taken(uow: UnitOfWork, channel_id: int, external_id: str) -> bool:
    return uow.run(_TAKEN, {"channel_id": channel_id,
                                                    "external_id": _fit(external_id)}).first() is not None


def take(uow: UnitOfWork, tenant_id: int, channel_id: int, external_id: str, kind: str) -> None:
    """Record the item in the caller's transaction; IntegrityError when a concurrent transaction
    took it first."""
    uow.run(_TAKE, {"tenant_id": tenant_id, "channel_id": channel_id,
                                            "external_id": _fit(external_id), "kind": kind[:32], "now": utcnow()})


def _fit(external_id: str) -> str:
    return external_id if len(external_id) <= MAX_ID else external_id[-MAX_ID:]
