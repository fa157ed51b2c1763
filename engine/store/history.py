"""Each instance's history: an append-only timeline of what happened to it and who did it
(contract §5.7). Rows are written by whoever does the thing, in the same unit of work, through
``record`` (one event) or ``record_many`` (an advance's events, one multi-row insert); they are
never updated, and go only with their instance (retention, ``ON DELETE CASCADE``).

An *actor* is ``{"type": "api_key"|"webhook"|"channel"|"system", "name": ...}``: by default the
unit of work's (``UnitOfWork.actor``). The chat's own messages stay in ``conversation.messages``:
an event links them (``detail.binding_id``, ``detail.message_id``), it never copies their text.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from sqlalchemy import JSON, ForeignKey, Index, String, bindparam, insert
from sqlalchemy.orm import Mapped, mapped_column

from engine.store.db import Base, BigId, utcnow
from engine.store.driver import Statement
from engine.store.unit_of_work import Actor, UnitOfWork

KINDS = ("started", "failed", "retried", "cancelled", "variables_set", "task_completed", "task_claimed",
         "task_assigned", "conversation_claimed", "conversation_assigned", "skipped", "rewound", "migrated",
         "message_received", "signal_received", "completed")


class HistoryEvent(Base):
    """One event of an instance's history (``kind`` one of ``KINDS``); ``detail`` is the kind's own."""

    __tablename__ = "history_events"
    __table_args__ = (Index("ix_history_events_instance_id", "instance_id", "id"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))
    element_id: Mapped[str | None] = mapped_column(String(255))
    actor: Mapped[dict[str, str]] = mapped_column(JSON)
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)


_COLUMNS = ("tenant_id", "instance_id", "at", "kind", "element_id", "actor", "detail")
_INSERT = Statement(insert(HistoryEvent.__table__).values({name: bindparam(name) for name in _COLUMNS}))


def event(*, tenant_id: int, instance_id: int, kind: str, actor: Actor | dict[str, str],
          element_id: str | None = None, detail: dict[str, Any] | None = None,
          at: datetime | None = None) -> dict[str, Any]:
    """One event's row, for ``record_many``."""
    if kind not in KINDS:
        raise ValueError(f"unknown history event kind {kind!r}")
    return {"tenant_id": tenant_id, "instance_id": instance_id, "at": at or utcnow(), "kind": kind,
            "element_id": element_id, "actor": actor.as_dict() if isinstance(actor, Actor) else dict(actor),
            "detail": detail or {}}


def record(uow: UnitOfWork, *, tenant_id: int, instance_id: int, kind: str,
           actor: Actor | dict[str, str] | None = None, element_id: str | None = None,
           detail: dict[str, Any] | None = None) -> None:
    """Append one event to an instance's history in ``uow`` (committed or rolled back with what it
    records). ``actor``: the unit of work's when not given."""
    record_many(uow, [event(tenant_id=tenant_id, instance_id=instance_id, kind=kind, actor=actor or uow.actor,
                            element_id=element_id, detail=detail)])


def record_many(uow: UnitOfWork, events: Iterable[dict[str, Any]]) -> None:
    """Append rows made by ``event`` in one statement (on the ORM session or the driver)."""
    rows = list(events)
    if not rows:
        return
    if len(rows) == 1:
        uow.count(_INSERT, rows[0])
        return
    _insert_rows(uow, rows)


def _insert_rows(uow: UnitOfWork, rows: list[dict[str, Any]]) -> None:
    # One multi-row INSERT: its statement is compiled per row count (an advance records 1-3 events).
    statement = _MULTI.get(len(rows))
    if statement is None:
        table = HistoryEvent.__table__
        params = [{name: bindparam(f"{name}_{i}", type_=table.c[name].type) for name in _COLUMNS}
                  for i in range(len(rows))]
        statement = _MULTI.setdefault(len(rows), Statement(insert(HistoryEvent.__table__).values(params)))
    uow.count(statement, {f"{name}_{i}": row[name] for i, row in enumerate(rows) for name in _COLUMNS})


_MULTI: dict[int, Statement] = {}
