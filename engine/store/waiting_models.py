"""The tables of what a running instance waits for outside its own state: external tasks (a
worker's) and event subscriptions (a message or signal from elsewhere). Both are written with the
instance state, in the runner's save transaction."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from engine.store.db import BigId, db, utcnow


class ExternalTaskRow(db.Model):
    """A service task that waits for an external worker (Camunda's pattern); written with the
    instance state. ``status``: open (fetchable unless locked or failed), completed, cancelled.

    A worker's lock is ``worker_id`` until ``lock_expires_at``; an expired lock frees the task.
    ``retries``: None until a worker reports a failure, then what it said is left (0: the
    instance fails at the task); ``retry_at``: not fetchable before.
    """

    __tablename__ = "external_tasks"
    __table_args__ = (
        UniqueConstraint("instance_id", "spiff_task_id"),
        Index("ix_external_tasks_fetch", "tenant_id", "status", "topic", "id"),
        Index("ix_external_tasks_tenant_instance_id", "tenant_id", "instance_id", "id"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    definition_id: Mapped[int] = mapped_column(ForeignKey("definitions.id"))
    spiff_task_id: Mapped[str] = mapped_column(String(36))
    element_id: Mapped[str] = mapped_column(String(255))
    topic: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), default="open")
    variables: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    worker_id: Mapped[str | None] = mapped_column(String(64))
    lock_expires_at: Mapped[datetime | None]
    retries: Mapped[int | None] = mapped_column(Integer)
    retry_at: Mapped[datetime | None]
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None]


class EventSubscription(db.Model):
    """A running instance waiting for a message or a signal by name (with the correlation values
    it would match), written with the instance state: how a thrown message, ``message.correlate``
    and ``signal.broadcast`` find their instances without reading every instance."""

    __tablename__ = "event_subscriptions"
    __table_args__ = (Index("ix_event_subscriptions_name", "tenant_id", "kind", "name"),
                      Index("ix_event_subscriptions_instance_id", "instance_id"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))  # message | signal
    name: Mapped[str] = mapped_column(String(255))
    element_id: Mapped[str] = mapped_column(String(255))
    correlation: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
