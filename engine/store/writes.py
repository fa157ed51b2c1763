"""The writes of the hottest paths, each written once against a unit of work
(``engine.store.unit_of_work``): creating an instance with its start job, adding a job, saving an
advance with the deletion of its job, finishing a job.

On PostgreSQL each write is ONE statement, whatever it does: the instance and its start job (and
the notification) in one statement with data-modifying CTEs, the save of an advance with the
deletion of its job; in a unit of work on the driver with a single write, that statement is the
whole transaction (autocommit: one round trip, no BEGIN/COMMIT). SQLite has no data-modifying
CTEs: there the same write runs as two statements in one transaction. Same rows either way
(tests/unit/engine/store/test_writes.py compares them).
"""
from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any, Iterator

from sqlalchemy import bindparam, exists, func, insert, literal, select, update

from engine.store import history
from engine.store.driver import Statement
from engine.store.models import HistoryEvent, Instance, InstanceSteps, Job
from engine.store.db import utcnow
from engine.store.unit_of_work import NOTIFY_CHANNEL, UnitOfWork

_instances, _jobs, _steps, _history = Instance.__table__, Job.__table__, InstanceSteps.__table__, HistoryEvent.__table__


class Lost(Exception):
    """A write found the instance or the job changed under it: nothing of it may stay (its unit of
    work is rolled back, or the savepoint around it)."""


@contextlib.contextmanager
def all_or_nothing(uow: UnitOfWork) -> Iterator[None]:
    """The block's writes (one save) stay only if it completes, while the unit of work goes on:
    on SQLite a savepoint (a save is two statements there, and ``Lost`` may come from the second);
    on PostgreSQL a save is one statement that writes nothing when it is lost: nothing to add."""
    if uow.postgres:
        yield
        return
    with uow.savepoint():
        yield


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
                            variables=bindparam("variables"), status="running", waiting_for=[],
                            started_by=bindparam("started_by"))
                    .returning(_instances.c.id))
_INSERT_INSTANCE = Statement(_insert_instance)


def _create_instance_pg() -> Statement:
    """The instance and its start job (and the notification) in one statement: the job's
    instance id comes from the instance's RETURNING. (The history's ``started`` event is written
    by the database's trigger on instances, migration 0021.)"""
    new = (insert(_instances)
           .values(tenant_id=bindparam("tenant_id"), definition_id=bindparam("definition_id"),
                   variables=bindparam("variables"), status="running", waiting_for=bindparam("waiting_for"),
                   revision=0, started_at=bindparam("now"), started_by=bindparam("started_by"))
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


def _save_advance_pg(with_event: bool = False) -> Statement:
    """The save of an advance and the deletion of its job (``with_event``: and the history event
    of its end) in one statement, all or nothing.

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
    columns = [
        select(func.count()).select_from(done).scalar_subquery(),
        select(following.c.kind).scalar_subquery(),
        select(func.pg_notify(NOTIFY_CHANNEL, following.c.kind)).where(exists(select(done.c.id)))
        .scalar_subquery()]
    if with_event:  # the history event of an advance that ends the instance, written only if it saved
        event = insert(_history).from_select(
            ["tenant_id", "instance_id", "at", "kind", "element_id", "actor", "detail"],
            select(bindparam("event_tenant_id"), saved.c.id, bindparam("now"), bindparam("event_kind"),
                   bindparam("event_element_id", type_=_history.c.element_id.type),
                   bindparam("event_actor", type_=_history.c.actor.type),
                   bindparam("event_detail", type_=_history.c.detail.type))).returning(_history.c.id).cte("event")
        columns.append(select(func.count()).select_from(event).scalar_subquery())
    return Statement(select(*columns), writes=True)


_SAVE_ADVANCE_PG = _save_advance_pg()
_SAVE_ADVANCE_EVENT_PG = _save_advance_pg(with_event=True)


# -- the writes ------------------------------------------------------------------------------------

def add_job(uow: UnitOfWork, tenant_id: int, kind: str, *, instance_id: int | None = None,
            payload: dict[str, Any] | None = None, run_at: datetime | None = None) -> None:
    """Queue a job in the unit of work; workers wake for it when it commits (a delayed
    job too: a sleeping worker must learn of an earlier due time)."""
    uow.count(_INSERT_JOB_PG if uow.postgres else _INSERT_JOB,
                   {"tenant_id": tenant_id, "instance_id": instance_id, "kind": kind,
                    "payload": payload or {}, "run_at": run_at or utcnow()})
    uow.ready(kind, notified=uow.postgres)


def add_handed_job(uow: UnitOfWork, tenant_id: int, kind: str, payload: dict[str, Any], worker_id: str,
                   locked_until: datetime) -> int:
    """Queue a job already leased to ``worker_id`` (until ``locked_until``), as a claim would have
    leased it; its id. Nobody is woken: the holder is handed the job at commit."""
    [(job_id,)] = uow.rows(_INSERT_HANDED_JOB, {
        "tenant_id": tenant_id, "instance_id": None, "kind": kind, "payload": payload, "run_at": utcnow(),
        "locked_by": worker_id, "locked_until": locked_until})
    return job_id


def create_instance(uow: UnitOfWork, tenant_id: int, definition_id: int, variables: dict[str, Any],
                    start_kind: str, start: dict[str, Any] | None = None) -> int:
    """A running instance and its start job (``start_kind``, the runner's first event); its id.
    ``start``: where it begins (``start_event``) and what triggered it (``trigger``), for the runner.
    The unit of work's actor is who started it (``started_by``): the database writes the history's
    ``started`` event with the instance (a trigger, migration 0021)."""
    payload = {"variables": variables, **(start or {})}
    started_by = uow.actor.as_dict()
    if uow.postgres:
        [(instance_id, jobs)] = uow.rows(_CREATE_INSTANCE_PG, {
            "tenant_id": tenant_id, "definition_id": definition_id, "variables": variables, "waiting_for": [],
            "kind": start_kind, "payload": payload, "now": utcnow(), "started_by": started_by})
        assert jobs == 1
        uow.ready(start_kind, notified=True)
        return instance_id
    [(instance_id,)] = uow.rows(_INSERT_INSTANCE, {"tenant_id": tenant_id, "definition_id": definition_id,
                                                        "variables": variables, "started_by": started_by})
    add_job(uow, tenant_id, start_kind, instance_id=instance_id, payload=payload)
    return instance_id


def save_advance(uow: UnitOfWork, instance_id: int, loaded_revision: int, values: dict[str, Any],
                 job_id: int, worker_id: str, event: dict[str, Any] | None = None) -> None:
    """Write an advance's result (``SAVED_COLUMNS``) and delete its job, if the instance is still
    at ``loaded_revision`` and this worker still holds the job's lease (compare-and-swap: of two
    workers only one can save); ``Lost`` otherwise, and nothing is written. The instance's next
    due job, held back by this one until now, makes the workers wake at commit. ``event``: a row of
    ``history.event`` (the instance's end) written with it, in the same statement on PostgreSQL."""
    if not uow.postgres:
        save_instance(uow, instance_id, loaded_revision, values)
        finish_job(uow, job_id, worker_id, instance_id)
        if event is not None:
            history.record_many(uow, [event])
        return
    params = {f"new_{column}": values[column] for column in SAVED_COLUMNS}
    params.update(instance_id=instance_id, loaded_revision=loaded_revision, job_id=job_id, worker_id=worker_id,
                  now=utcnow())
    if event is not None:
        params.update({f"event_{name}": event[name] for name in ("tenant_id", "kind", "element_id", "actor", "detail")})
        [(done, next_kind, _, _)] = uow.rows(_SAVE_ADVANCE_EVENT_PG, params)
    else:
        [(done, next_kind, _)] = uow.rows(_SAVE_ADVANCE_PG, params)
    if done != 1:
        raise Lost()
    if next_kind is not None:
        uow.ready(next_kind, notified=True)


def save_instance(uow: UnitOfWork, instance_id: int, loaded_revision: int, values: dict[str, Any]) -> None:
    """Write an advance's result (``SAVED_COLUMNS``) if the instance is still at ``loaded_revision``
    (compare-and-swap: of two workers only one can save); ``Lost`` otherwise."""
    params = {f"new_{column}": values[column] for column in SAVED_COLUMNS}
    params.update(instance_id=instance_id, loaded_revision=loaded_revision)
    if uow.count(_SAVE_INSTANCE, params) != 1:
        raise Lost()


def add_path_steps(uow: UnitOfWork, tenant_id: int, instance_id: int, steps: list[list[Any]]) -> None:
    """Append the path rows of what a save pruned (``engine.store.pruning``), in the save's transaction."""
    if steps:
        uow.count(_INSERT_STEPS, {"tenant_id": tenant_id, "instance_id": instance_id, "steps": steps})


def finish_job(uow: UnitOfWork, job_id: int, worker_id: str, instance_id: int | None) -> None:
    """Delete a done job if this worker still holds its lease (``Lost`` otherwise); the instance's
    next due job, held back by this one until now, makes the workers wake at commit."""
    rows = uow.rows(_FINISH_JOB, {"job_id": job_id, "worker_id": worker_id, "instance_id": instance_id,
                                       "now": utcnow()})
    if len(rows) != 1:
        raise Lost()
    if rows[0][0] is not None:
        uow.ready(rows[0][0])
