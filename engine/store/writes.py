"""The one write path of the hottest statements: creating an instance with its start job, adding a
job, saving an advance, finishing a job. Each is written once, against an ``Executor``.

Two executors run them: ``SessionExecutor`` inside the ORM session's transaction (whatever else
that transaction writes), and the executor of ``short_transaction``, a transaction of its own for
a few statements and nothing else (the common webhook start, an advance that writes only the
instance and its job): on SQLite on the driver connection, on PostgreSQL on a Core connection.
Both wake the workers for the jobs they made ready once the transaction has committed, and on
PostgreSQL notify other processes (``NOTIFY baton_jobs``, delivered at commit).
"""
from __future__ import annotations

import contextlib
from collections import Counter
from datetime import datetime
from typing import Any, Callable, Iterator, Protocol

from sqlalchemy import bindparam, insert, select, text, update
from sqlalchemy.engine import Engine

from engine.store.db import READY, db, sqlite_write, utcnow
from engine.store.models import Instance, InstanceSteps, Job
from engine.store.statements import Statement

NOTIFY_CHANNEL = "baton_jobs"
_NOTIFY = text("SELECT pg_notify(:channel, :kind)")

_instances, _jobs, _steps = Instance.__table__, Job.__table__, InstanceSteps.__table__


class Executor(Protocol):
    """Where a write runs: rows of a statement, rows it changed, and the jobs it made ready."""

    def rows(self, statement: Statement, params: dict[str, Any]) -> list[tuple]: ...
    def count(self, statement: Statement, params: dict[str, Any]) -> int: ...
    def ready(self, kind: str | None) -> None: ...


class SessionExecutor:
    """Statements on the ORM session's connection, in its transaction; workers wake when it commits
    (``engine.store.db.BatonSession.commit``)."""

    def __init__(self, session=None):
        self.session = session if session is not None else db.session

    def rows(self, statement: Statement, params: dict[str, Any]) -> list[tuple]:
        return self.session.connection().execute(statement.core, params).all()

    def count(self, statement: Statement, params: dict[str, Any]) -> int:
        return self.session.connection().execute(statement.core, params).rowcount

    def ready(self, kind: str | None) -> None:
        ready = self.session.info.setdefault(READY, Counter())
        if kind not in ready and self.session.get_bind().dialect.name == "postgresql":
            # Delivered by PostgreSQL at commit to every LISTENing worker process; the payload is
            # the kind, so a pool wakes only for its own kinds.
            self.session.execute(_NOTIFY, {"channel": NOTIFY_CHANNEL, "kind": kind or ""})
        ready[kind] += 1


class _DriverExecutor:
    """Statements on SQLite's driver connection (``Statement.run``), inside ``sqlite_write``."""

    def __init__(self, connection, dialect):
        self.connection, self.dialect, self.made_ready = connection, dialect, Counter()

    def rows(self, statement: Statement, params: dict[str, Any]) -> list[tuple]:
        return statement.run(self.connection, self.dialect, params)[0]

    def count(self, statement: Statement, params: dict[str, Any]) -> int:
        return statement.run(self.connection, self.dialect, params)[1]

    def ready(self, kind: str | None) -> None:
        self.made_ready[kind] += 1


class _ConnectionExecutor:
    """Statements on a Core connection of its own (PostgreSQL), notifying at commit."""

    def __init__(self, connection):
        self.connection, self.made_ready = connection, Counter()

    def rows(self, statement: Statement, params: dict[str, Any]) -> list[tuple]:
        return self.connection.execute(statement.core, params).all()

    def count(self, statement: Statement, params: dict[str, Any]) -> int:
        return self.connection.execute(statement.core, params).rowcount

    def ready(self, kind: str | None) -> None:
        if kind not in self.made_ready and self.connection.dialect.name == "postgresql":
            self.connection.execute(_NOTIFY, {"channel": NOTIFY_CHANNEL, "kind": kind or ""})
        self.made_ready[kind] += 1


class Lost(Exception):
    """A write found the instance or the job changed under it: the whole transaction is rolled back."""


@contextlib.contextmanager
def short_transaction(engine: Engine, wakers: Callable[[Counter], None] | None) -> Iterator[Executor]:
    """A transaction of its own for a few statements, outside the ORM session (whose per-transaction
    machinery costs more than these statements): commits when the block ends, rolls back if it
    raises, then wakes ``wakers`` for the jobs it made ready.

    SQLite: the driver connection, under the same write lock and BEGIN IMMEDIATE as every other
    transaction (``engine.store.db.sqlite_write``). Elsewhere: a pooled Core connection.
    """
    if engine.dialect.name == "sqlite":
        with sqlite_write(engine) as connection:
            executor = _DriverExecutor(connection, engine.dialect)
            yield executor
    else:
        with engine.connect() as connection:
            executor = _ConnectionExecutor(connection)
            try:
                yield executor
            except BaseException:
                connection.rollback()
                raise
            connection.commit()
    if executor.made_ready and wakers is not None:
        wakers(executor.made_ready)


# -- the statements --------------------------------------------------------------------------------

_INSERT_INSTANCE = Statement(
    insert(_instances).values(tenant_id=bindparam("tenant_id"), definition_id=bindparam("definition_id"),
                              variables=bindparam("variables"), status="running", waiting_for=[])
    .returning(_instances.c.id))
_INSERT_JOB = Statement(insert(_jobs).values(
    {name: bindparam(name) for name in ("tenant_id", "instance_id", "kind", "payload", "run_at")}))
SAVED_COLUMNS = ("status", "state", "variables", "waiting_for", "output_keys", "error", "revision",
                 "called_definitions", "completed_at")
_SAVE_INSTANCE = Statement(
    update(_instances)
    .where(_instances.c.id == bindparam("instance_id"), _instances.c.revision == bindparam("loaded_revision"))
    .values({column: bindparam(f"new_{column}") for column in SAVED_COLUMNS}))
_INSERT_STEPS = Statement(insert(_steps).values(
    {name: bindparam(name) for name in ("tenant_id", "instance_id", "steps")}))
_next_job = _jobs.alias("next_job")
# Deleting an instance's job returns the kind of the instance's next due job (held back by this one).
_FINISH_JOB = Statement(
    _jobs.delete().where(_jobs.c.id == bindparam("id"), _jobs.c.locked_by == bindparam("worker_id"))
    .returning(select(_next_job.c.kind)
               .where(_next_job.c.instance_id == bindparam("instance_id"), _next_job.c.run_at <= bindparam("now"),
                      _next_job.c.id != bindparam("id"))
               .limit(1).scalar_subquery()))


# -- the writes ------------------------------------------------------------------------------------

def add_job(executor: Executor, tenant_id: int, kind: str, *, instance_id: int | None = None,
            payload: dict[str, Any] | None = None, run_at: datetime | None = None) -> None:
    """Queue a job in the executor's transaction; workers wake for it when it commits (a delayed
    job too: a sleeping worker must learn of an earlier due time)."""
    executor.count(_INSERT_JOB, {"tenant_id": tenant_id, "instance_id": instance_id, "kind": kind,
                                 "payload": payload or {}, "run_at": run_at or utcnow()})
    executor.ready(kind)


def create_instance(executor: Executor, tenant_id: int, definition_id: int, variables: dict[str, Any],
                    start_kind: str, start: dict[str, Any] | None = None) -> int:
    """A running instance and its start job (``start_kind``, the runner's first event); its id.
    ``start``: where it begins (``start_event``) and what triggered it (``trigger``), for the runner."""
    [(instance_id,)] = executor.rows(_INSERT_INSTANCE, {"tenant_id": tenant_id, "definition_id": definition_id,
                                                        "variables": variables})
    add_job(executor, tenant_id, start_kind, instance_id=instance_id, payload={"variables": variables, **(start or {})})
    return instance_id


def save_instance(executor: Executor, instance_id: int, loaded_revision: int, values: dict[str, Any]) -> None:
    """Write an advance's result (``SAVED_COLUMNS``) if the instance is still at ``loaded_revision``
    (compare-and-swap: of two workers only one can save); ``Lost`` otherwise."""
    params = {f"new_{column}": values[column] for column in SAVED_COLUMNS}
    params.update(instance_id=instance_id, loaded_revision=loaded_revision)
    if executor.count(_SAVE_INSTANCE, params) != 1:
        raise Lost()


def add_path_steps(executor: Executor, tenant_id: int, instance_id: int, steps: list[list[Any]]) -> None:
    """Append the path rows of what a save pruned (``engine.store.pruning``), in the save's transaction."""
    if steps:
        executor.count(_INSERT_STEPS, {"tenant_id": tenant_id, "instance_id": instance_id, "steps": steps})


def finish_job(executor: Executor, job_id: int, worker_id: str, instance_id: int | None) -> None:
    """Delete a done job if this worker still holds its lease (``Lost`` otherwise); the instance's
    next due job, held back by this one until now, makes the workers wake at commit."""
    rows = executor.rows(_FINISH_JOB, {"id": job_id, "worker_id": worker_id, "instance_id": instance_id,
                                       "now": utcnow()})
    if len(rows) != 1:
        raise Lost()
    if rows[0][0] is not None:
        executor.ready(rows[0][0])
