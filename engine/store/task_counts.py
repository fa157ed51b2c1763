"""How many tasks a tenant has, per definition and status: the ``total`` of ``task.list``.

An exact ``count(*)`` reads every matching index entry, so ``task.list`` on 100,000 tasks took
twice as long as on 1,000 (bench/task_list.py). This table keeps the counts instead, one row per
``(tenant_id, definition_id, status)``; a total is the sum of a tenant's few rows.

Database triggers keep it (migration 0016): every INSERT, DELETE and change of tenant, definition
or status of a ``tasks`` row changes the counts in the same transaction, whichever code wrote
it, the deletes that cascade from a removed instance included, so the counts are as exact and as
durable as the rows. On PostgreSQL the trigger runs once per statement and applies its changes
in key order (rows changed together lock their counters in one order: no deadlock between two
such statements). The cost: tasks of one tenant, definition and status share one counter row, so
two transactions that open or close such tasks at once take turns on it until they commit.
"""
from __future__ import annotations

from sqlalchemy import BigInteger, String, func, select
from sqlalchemy.orm import Mapped, mapped_column

from engine.store.db import Base
from engine.store.unit_of_work import UnitOfWork


class TaskCount(Base):
    """Tasks of a tenant's definition in a status (no foreign keys: the tasks rows hold them, and
    the triggers write these rows on every task change)."""

    __tablename__ = "task_counts"
    tenant_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    definition_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    tasks: Mapped[int] = mapped_column(BigInteger)


def total(uow: UnitOfWork, tenant_id: int, *, status: str | None = None, definition_id: int | None = None) -> int:
    """The tenant's tasks (of ``status``, of ``definition_id``): a sum over a handful of rows."""
    query = select(func.coalesce(func.sum(TaskCount.tasks), 0)).where(TaskCount.tenant_id == tenant_id)
    if status is not None:
        query = query.where(TaskCount.status == status)
    if definition_id is not None:
        query = query.where(TaskCount.definition_id == definition_id)
    return int(uow.execute(query).scalar_one())
