"""The tables of operator work besides the tasks' own columns: Camunda Forms deployed with
definitions, and who may see each task in an inbox (``engine.operators``)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from engine.store.db import Base, BigId, utcnow


class Form(Base):
    """One version of a Camunda Form (form-js JSON), given to ``definition.deploy {forms}``; a
    version per deploy that carries it, as Camunda numbers them. ``form_key`` is the schema's ``id``."""

    __tablename__ = "forms"
    __table_args__ = (UniqueConstraint("tenant_id", "form_key", "version"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    form_key: Mapped[str] = mapped_column(String(255))
    version: Mapped[int] = mapped_column(Integer)
    schema: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TaskAudience(Base):
    """Who a task is for now, one row per name: ``u:<user>`` for its assignee, or, while nobody
    holds it, ``u:<candidate user>`` and ``g:<candidate group>`` for each candidate. What
    ``task.list {mine}`` and ``{candidate_group}`` read, by index. ``status`` follows the task's
    (a trigger on ``tasks``, migration 0020: whatever code closes a task); the rows go with it."""

    __tablename__ = "task_audience"
    __table_args__ = (Index("ix_task_audience_who", "tenant_id", "who", "status", "task_id"),)
    task_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("tasks.id", ondelete="CASCADE"),
                                         primary_key=True, autoincrement=False)
    who: Mapped[str] = mapped_column(String(210), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))
