"""The one write path of the hottest statements: creating an instance with its start job, adding a
job, claiming jobs, saving an advance with the deletion of its job. Each is written once, against
an ``Executor``.

Two executors run them: ``SessionExecutor`` inside the ORM session's transaction (whatever else
that transaction writes), and the executor of ``short_transaction``, a transaction of its own for
a few statements and nothing else (the webhook start, a claim, an advance that writes only the
instance and its job), on the DBAPI connection (``Statement.run``: no SQLAlchemy execution
context). Both wake the workers for the jobs they made ready once the transaction has committed,
and on PostgreSQL notify other processes (``NOTIFY baton_jobs``, delivered at commit).

On PostgreSQL each write is ONE statement, whatever it does: the instance and its start job (and
the notification) in one statement with data-modifying CTEs, the save of an advance with the
deletion of its job; a short transaction that runs a single write runs it in autocommit, so it
costs one round trip and no BEGIN/COMMIT. SQLite has no data-modifying CTEs: there the same
write runs as two statements in one transaction. Same rows either way
(tests/unit/engine/store/test_writes.py compares them).
"""
from __future__ import annotations

import contextlib
from collections import Counter
from datetime import datetime
from typing import Any, Callable, Iterator, Protocol

from sqlalchemy import bindparam, exists, func, insert, literal, select, update
from sqlalchemy.engine import Engine

from engine.store.db import READY, db, sqlite_write, utcnow
from engine.store.models import Instance, InstanceSteps, Job
from engine.store.statements import Statement

NOTIFY_CHANNEL = "baton_jobs"
_NOTIFY = Statement(select(func.pg_notify(NOTIFY_CHANNEL, bindparam("kind"))))

_instances, _jobs, _steps = Instance.__table__, Job.__table__, InstanceSteps.__table__


class Executor(Protocol):
    """Where a write runs: rows of a statement, rows it changed, and the jobs it made ready
    (``notified``: the statement itself sent PostgreSQL's NOTIFY for it)."""

    postgres: bool

    def rows(self, statement: Statement, params: dict[str, Any]) -> list[tuple]: ...
    def count(self, statement: Statement, params: dict[str, Any]) -> int: ...
    def ready(self, kind: str | None, notified: bool = False) -> None: ...


class SessionExecutor:
    """Statements on the ORM session's connection, in its transaction; workers wake when it commits
    (``engine.store.db.BatonSession.commit``)."""

    def __init__(self, session=None):
        self.session = session if session is not None else db.session
        self.postgres = self.session.get_bind().dialect.name == "postgresql"

    def rows(self, statement: Statement, params: dict[str, Any]) -> list[tuple]:
        return self.session.connection().execute(statement.core, params).all()

    def count(self, statement: Statement, params: dict[str, Any]) -> int:
        return self.session.connection().execute(statement.core, params).rowcount

    def ready(self, kind: str | None, notified: bool = False) -> None:
        ready = self.session.info.setdefault(READY, Counter())
        if kind not in ready and self.postgres and not notified:
            # Delivered by PostgreSQL at commit to every LISTENing worker process; the payload is
            # the kind, so a pool wakes only for its own kinds.
            self.session.execute(_NOTIFY.core, {"kind": kind or ""})
        ready[kind] += 1


class _DriverExecutor:
    """Statements on the DBAPI connection (``Statement.run``): SQLite's inside ``sqlite_write``,
    psycopg's in a transaction or, for a single write, in autocommit."""

    def __init__(self, connection, dialect, single_write: bool):
        self.connection, self.dialect, self.made_ready = connection, dialect, Counter()
        self.postgres = dialect.name == "postgresql"
        # In autocommit (PostgreSQL) each statement commits by itself: a second write would not
        # be atomic with the first. SQLite runs every block in a transaction.
        self.single_write, self.wrote = single_write and self.postgres, False

    def _run(self, statement: Statement, params: dict[str, Any]) -> tuple[list[tuple], int]:
        if statement.writes:
            if self.wrote and self.single_write:
                raise RuntimeError("a single-write short transaction ran a second write")
            self.wrote = True
        return statement.run(self.connection, self.dialect, params)

    def rows(self, statement: Statement, params: dict[str, Any]) -> list[tuple]:
        return self._run(statement, params)[0]

    def count(self, statement: Statement, params: dict[str, Any]) -> int:
        return self._run(statement, params)[1]

    @contextlib.contextmanager
    def all_or_nothing(self) -> Iterator[None]:
        """The block's writes stay only if it completes, while the transaction goes on: on SQLite a
        savepoint, rolled back if the block raises (a save's ``Lost`` from its second statement,
        after the first wrote). On PostgreSQL a save is one statement that writes nothing when
        lost, and a statement that fails fails the whole transaction: nothing to add."""
        if self.postgres:
            yield
            return
        self.connection.execute("SAVEPOINT baton_write")
        try:
            yield
        except BaseException:
            self.connection.execute("ROLLBACK TO baton_write")
            raise
        finally:
            self.connection.execute("RELEASE baton_write")

    def ready(self, kind: str | None, notified: bool = False) -> None:
        if kind not in self.made_ready and self.postgres and not notified:
            # In autocommit the write has committed already: the notification follows it.
            _NOTIFY.run(self.connection, self.dialect, {"kind": kind or ""})
        self.made_ready[kind] += 1


class Lost(Exception):
    """A write found the instance or the job changed under it: the whole transaction is rolled back."""


@contextlib.contextmanager
def short_transaction(engine: Engine, wakers: Callable[[Counter], None] | None, *,
                      single_write: bool = False) -> Iterator[Executor]:
    """A transaction of its own for a few statements, outside the ORM session (whose per-transaction
    machinery costs more than these statements): commits when the block ends, rolls back if it
    raises, then wakes ``wakers`` for the jobs it made ready.

    SQLite: the driver connection, under the same write lock and BEGIN IMMEDIATE as every other
    transaction (``engine.store.db.sqlite_write``). PostgreSQL: a pooled psycopg connection; with
    ``single_write`` (the block runs at most one statement that writes, reads before it) in
    autocommit, so that one statement is the transaction: no BEGIN and COMMIT round trips.
    """
    if engine.dialect.name == "sqlite":
        with sqlite_write(engine) as connection:
            executor = _DriverExecutor(connection, engine.dialect, single_write)
            yield executor
    else:
        raw = engine.raw_connection()
        driver = raw.driver_connection
        try:
            driver.autocommit = single_write
            executor = _DriverExecutor(driver, engine.dialect, single_write)
            try:
                yield executor
            except BaseException:
                driver.rollback()
                raise
            driver.commit()
        except BaseException:
            if driver.closed:  # the connection broke: never hand it out again
                raw.invalidate()
            raise
        finally:
            try:
                if not driver.closed:
                    driver.autocommit = False
            except Exception:  # noqa: BLE001 - a connection in a state we cannot reset: drop it
                raw.invalidate()
            raw.close()
    if executor.made_ready and wakers is not None:
        wakers(executor.made_ready)


# -- the statements --------------------------------------------------------------------------------

def _notifying(statement):
    """A PostgreSQL job insert that also notifies the workers of its kind (delivered at commit;
    PostgreSQL sends one notification per kind and transaction, however many rows)."""
    return statement.returning(func.pg_notify(NOTIFY_CHANNEL, _jobs.c.kind))


_JOB_COLUMNS = ("tenant_id", "instance_id", "kind", "payload", "run_at")
_insert_job = insert(_jobs).values({name: bindparam(name) for name in _JOB_COLUMNS})
_INSERT_JOB = Statement(_insert_job)
_INSERT_JOB_PG = Statement(_notifying(_insert_job))
# A job leased from the start to a pool of this process (``add_handed_job``): no NOTIFY, nobody
# else is to claim it.
_INSERT_HANDED_JOB = Statement(
    insert(_jobs).values({**{name: bindparam(name) for name in (*_JOB_COLUMNS, "locked_by", "locked_until")},
                          "attempts": 1}).returning(_jobs.c.id))

_insert_instance = (insert(_instances)
                    .values(tenant_id=bindparam("tenant_id"), definition_id=bindparam("definition_id"),
                            variables=bindparam("variables"), status="running", waiting_for=[])
                    .returning(_instances.c.id))
_INSERT_INSTANCE = Statement(_insert_instance)


def _create_instance_pg() -> Statement:
    """The instance and its start job (and the notification) in one statement: the job's
    instance id comes from the instance's RETURNING."""
    new = (insert(_instances)
           .values(tenant_id=bindparam("tenant_id"), definition_id=bindparam("definition_id"),
                   variables=bindparam("variables"), status="running", waiting_for=bindparam("waiting_for"),
                   revision=0, started_at=bindparam("now"))
           .returning(_instances.c.id).cte("new_instance"))
    job = _notifying(insert(_jobs).from_select(
        ["tenant_id", "instance_id", "kind", "payload", "run_at", "attempts", "created_at"],
        select(bindparam("tenant_id"), new.c.id, bindparam("kind"), bindparam("payload", type_=_jobs.c.payload.type),
               bindparam("now"), literal(0), bindparam("now")))).cte("start_job")
    return Statement(select(new.c.id, select(func.count()).select_from(job).scalar_subquery()), writes=True)


_CREATE_INSTANCE_PG = _create_instance_pg()

SAVED_COLUMNS = ("status", "state", "variables", "waiting_for", "output_keys", "error", "revision",
                 "called_definitions", "completed_at")
_save_instance = (update(_instances)
                  .where(_instances.c.id == bindparam("instance_id"),
                         _instances.c.revision == bindparam("loaded_revision"))
                  .values({column: bindparam(f"new_{column}") for column in SAVED_COLUMNS}))
_SAVE_INSTANCE = Statement(_save_instance)
_INSERT_STEPS = Statement(insert(_steps).values(
    {name: bindparam(name) for name in ("tenant_id", "instance_id", "steps")}))
_next_job = _jobs.alias("next_job")


def _next_kind():
    """The kind of the instance's next due job besides ``job_id``'s (held back by it until now)."""
    return (select(_next_job.c.kind)
            .where(_next_job.c.instance_id == bindparam("instance_id"), _next_job.c.run_at <= bindparam("now"),
                   _next_job.c.id != bindparam("job_id"))
            .limit(1))


# Deleting an instance's job returns the kind of the instance's next due job.
_FINISH_JOB = Statement(
    _jobs.delete().where(_jobs.c.id == bindparam("job_id"), _jobs.c.locked_by == bindparam("worker_id"))
    .returning(_next_kind().scalar_subquery()))


def _save_advance_pg() -> Statement:
    """The save of an advance and the deletion of its job in one statement, all or nothing.

    The job's row is locked first (``FOR UPDATE``: a claim that took it over after its lease ran
    out is seen, and none can take it over meanwhile); the instance is updated only if this
    worker still holds the job and the instance is at the revision it loaded; the job is deleted
    only if the instance was. Returns whether it was, and the kind of the instance's next due job
    (held back by this one), whose workers the same statement notifies.
    """
    # (No parameter is named like a column: SQLAlchemy would add it to the UPDATE's SET.)
    held = (select(_jobs.c.id).where(_jobs.c.id == bindparam("job_id"), _jobs.c.locked_by == bindparam("worker_id"))
            .with_for_update().cte("held"))
    saved = (_save_instance.where(exists(select(held.c.id))).returning(_instances.c.id).cte("saved"))
    done = (_jobs.delete().where(_jobs.c.id.in_(select(held.c.id)), exists(select(saved.c.id)))
            .returning(_jobs.c.id).cte("done"))
    following = _next_kind().cte("following")
    return Statement(select(
        select(func.count()).select_from(done).scalar_subquery(),
        select(following.c.kind).scalar_subquery(),
        select(func.pg_notify(NOTIFY_CHANNEL, following.c.kind)).where(exists(select(done.c.id)))
        .scalar_subquery()), writes=True)


_SAVE_ADVANCE_PG = _save_advance_pg()


# -- the writes ------------------------------------------------------------------------------------

def add_job(executor: Executor, tenant_id: int, kind: str, *, instance_id: int | None = None,
            payload: dict[str, Any] | None = None, run_at: datetime | None = None) -> None:
    """Queue a job in the executor's transaction; workers wake for it when it commits (a delayed
    job too: a sleeping worker must learn of an earlier due time)."""
    executor.count(_INSERT_JOB_PG if executor.postgres else _INSERT_JOB,
                   {"tenant_id": tenant_id, "instance_id": instance_id, "kind": kind,
                    "payload": payload or {}, "run_at": run_at or utcnow()})
    executor.ready(kind, notified=executor.postgres)


def add_handed_job(executor: Executor, tenant_id: int, kind: str, payload: dict[str, Any], worker_id: str,
                   locked_until: datetime) -> int:
    """Queue a job already leased to ``worker_id`` (until ``locked_until``), as a claim would have
    leased it; its id. Nobody is woken: the holder is handed the job at commit."""
    [(job_id,)] = executor.rows(_INSERT_HANDED_JOB, {
        "tenant_id": tenant_id, "instance_id": None, "kind": kind, "payload": payload, "run_at": utcnow(),
        "locked_by": worker_id, "locked_until": locked_until})
    return job_id


def create_instance(executor: Executor, tenant_id: int, definition_id: int, variables: dict[str, Any],
                    start_kind: str, start: dict[str, Any] | None = None) -> int:
    """A running instance and its start job (``start_kind``, the runner's first event); its id.
    ``start``: where it begins (``start_event``) and what triggered it (``trigger``), for the runner."""
    payload = {"variables": variables, **(start or {})}
    if executor.postgres:
        [(instance_id, jobs)] = executor.rows(_CREATE_INSTANCE_PG, {
            "tenant_id": tenant_id, "definition_id": definition_id, "variables": variables, "waiting_for": [],
            "kind": start_kind, "payload": payload, "now": utcnow()})
        assert jobs == 1
        executor.ready(start_kind, notified=True)
        return instance_id
    [(instance_id,)] = executor.rows(_INSERT_INSTANCE, {"tenant_id": tenant_id, "definition_id": definition_id,
                                                        "variables": variables})
    add_job(executor, tenant_id, start_kind, instance_id=instance_id, payload=payload)
    return instance_id


def save_advance(executor: Executor, instance_id: int, loaded_revision: int, values: dict[str, Any],
                 job_id: int, worker_id: str) -> None:
    """Write an advance's result (``SAVED_COLUMNS``) and delete its job, if the instance is still
    at ``loaded_revision`` and this worker still holds the job's lease (compare-and-swap: of two
    workers only one can save); ``Lost`` otherwise, and nothing is written. The instance's next
    due job, held back by this one until now, makes the workers wake at commit."""
    if not executor.postgres:
        save_instance(executor, instance_id, loaded_revision, values)
        finish_job(executor, job_id, worker_id, instance_id)
        return
    params = {f"new_{column}": values[column] for column in SAVED_COLUMNS}
    params.update(instance_id=instance_id, loaded_revision=loaded_revision, job_id=job_id, worker_id=worker_id,
                  now=utcnow())
    [(done, next_kind, _)] = executor.rows(_SAVE_ADVANCE_PG, params)
    if done != 1:
        raise Lost()
    if next_kind is not None:
        executor.ready(next_kind, notified=True)


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
    rows = executor.rows(_FINISH_JOB, {"job_id": job_id, "worker_id": worker_id, "instance_id": instance_id,
                                       "now": utcnow()})
    if len(rows) != 1:
        raise Lost()
    if rows[0][0] is not None:
        executor.ready(rows[0][0])
