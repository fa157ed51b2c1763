"""The one write path (``engine.store.writes``): the same writes through the ORM session's
transaction and through a short transaction of their own (on SQLite the driver connection, on
PostgreSQL a Core connection) must write the same rows; a failed short transaction rolls back
and gives the SQLite write lock back; a lost compare-and-swap or lease writes nothing."""
from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import select, update

from engine.jobs.kinds import START
from engine.store import writes
from engine.store.db import db, sqlite_write
from engine.store.models import Instance, InstanceSteps, Job
from tests.unit.conftest import deploy_for_new_tenant

VARIABLES = {"amount": 60, "text": "é ✓", "none": None, "nested": {"list": [1, 2.5, True]}}


@pytest.fixture
def definition(app):
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant("webhook_order.bpmn")
        db.session.rollback()  # no transaction (nor SQLite write lock) held by this thread
        yield tenant_id, deployed["definition_id"]
        db.session.rollback()
        db.session.remove()


def _rows(instance_id: int) -> tuple[dict, dict]:
    instance = db.session.execute(select(Instance.__table__).where(Instance.id == instance_id)).one()._asdict()
    job = db.session.execute(select(Job.__table__).where(Job.instance_id == instance_id)).one()._asdict()
    db.session.rollback()
    return instance, job


def _comparable(instance: dict, job: dict) -> tuple[dict, dict]:
    instance, job = dict(instance), dict(job)
    for row, keys in ((instance, ("id", "started_at")), (job, ("id", "instance_id", "run_at", "created_at"))):
        for key in keys:
            assert row.pop(key) is not None
    return instance, job


def test_a_short_transaction_writes_the_rows_the_session_writes(definition):
    tenant_id, definition_id = definition
    woken = []
    with writes.short_transaction(db.engine, woken.append) as executor:
        short = writes.create_instance(executor, tenant_id, definition_id, VARIABLES, START)
    session = writes.create_instance(writes.SessionExecutor(), tenant_id, definition_id, VARIABLES, START)
    db.session.commit()

    assert woken == [Counter({START: 1})]  # after the commit, once
    short_instance, short_job = _rows(short)
    assert short_instance["variables"] == VARIABLES and short_instance["tenant_id"] == tenant_id
    assert short_job["payload"] == {"variables": VARIABLES} and short_job["attempts"] == 0
    assert _comparable(*_rows(short)) == _comparable(*_rows(session))


def test_a_failed_short_transaction_writes_nothing_and_wakes_nobody(definition):
    tenant_id, definition_id = definition
    before = db.session.execute(select(Instance.id)).all()
    db.session.rollback()
    woken = []
    with pytest.raises(ZeroDivisionError):
        with writes.short_transaction(db.engine, woken.append) as executor:
            writes.create_instance(executor, tenant_id, definition_id, VARIABLES, START)
            1 / 0
    assert woken == []
    assert db.session.execute(select(Instance.id)).all() == before
    db.session.rollback()
    # The write lock is free again (a held one would make this wait BUSY_TIMEOUT_S, then fail).
    with writes.short_transaction(db.engine, None) as executor:
        writes.create_instance(executor, tenant_id, definition_id, VARIABLES, START)


def test_the_sqlite_driver_connection_rolls_back_and_releases_the_lock(definition, backend):
    if backend != "sqlite":  # the driver-level transaction is SQLite's alone
        with pytest.raises(RuntimeError, match="needs a SQLite engine"):
            with sqlite_write(db.engine):
                pass
        return
    with pytest.raises(Exception):
        with sqlite_write(db.engine) as connection:
            connection.execute("INSERT INTO no_such_table VALUES (1)")
    # The lock is free again: the ORM's own transactions still write (a held lock would make this
    # wait BUSY_TIMEOUT_S, then fail).
    tenant_id, definition_id = definition
    assert writes.create_instance(writes.SessionExecutor(), tenant_id, definition_id, {}, START) > 0
    db.session.commit()


def test_a_save_on_a_moved_revision_is_lost_and_writes_nothing(definition):
    tenant_id, definition_id = definition
    instance_id = writes.create_instance(writes.SessionExecutor(), tenant_id, definition_id, {}, START)
    db.session.execute(update(Instance).where(Instance.id == instance_id).values(revision=3))
    db.session.commit()
    with pytest.raises(writes.Lost):
        with writes.short_transaction(db.engine, None) as executor:
            writes.save_instance(executor, instance_id, 2, {
                "status": "completed", "state": None, "variables": {"x": 1}, "waiting_for": [], "output_keys": None,
                "error": None, "revision": 3, "called_definitions": None, "completed_at": None})
    assert db.session.get(Instance, instance_id).status == "running"
    db.session.rollback()


def test_finishing_a_job_leased_to_another_worker_is_lost(definition):
    tenant_id, definition_id = definition
    instance_id = writes.create_instance(writes.SessionExecutor(), tenant_id, definition_id, {}, START)
    db.session.execute(update(Job).where(Job.instance_id == instance_id).values(locked_by="other"))
    db.session.commit()
    job_id = db.session.execute(select(Job.id).where(Job.instance_id == instance_id)).scalar_one()
    db.session.rollback()
    with pytest.raises(writes.Lost):
        with writes.short_transaction(db.engine, None) as executor:
            writes.finish_job(executor, job_id, "me", instance_id)
    assert db.session.get(Job, job_id) is not None
    db.session.rollback()


def test_finishing_a_job_wakes_for_the_instance_job_it_held_back(definition):
    tenant_id, definition_id = definition
    instance_id = writes.create_instance(writes.SessionExecutor(), tenant_id, definition_id, {}, START)
    writes.add_job(writes.SessionExecutor(), tenant_id, "message", instance_id=instance_id)
    db.session.execute(update(Job).where(Job.instance_id == instance_id, Job.kind == START).values(locked_by="me"))
    db.session.commit()
    job_id = db.session.execute(select(Job.id).where(Job.instance_id == instance_id, Job.kind == START)).scalar_one()
    db.session.rollback()
    woken = []
    with writes.short_transaction(db.engine, woken.append) as executor:
        writes.finish_job(executor, job_id, "me", instance_id)
    assert woken == [Counter({"message": 1})]


def test_path_steps_are_the_same_rows_through_either_executor(definition):
    tenant_id, definition_id = definition
    steps = [[1795511533.8099885, "big_loop", "wait", "again", 64], [1795511533.81, "big_loop", "count", None, 256]]
    with writes.short_transaction(db.engine, None) as executor:
        instance_id = writes.create_instance(executor, tenant_id, definition_id, {}, START)
        writes.add_path_steps(executor, tenant_id, instance_id, steps)
        writes.add_path_steps(executor, tenant_id, instance_id, [])  # nothing pruned: no row
    writes.add_path_steps(writes.SessionExecutor(), tenant_id, instance_id, steps)
    db.session.commit()

    rows = db.session.execute(select(InstanceSteps.__table__).where(InstanceSteps.instance_id == instance_id)
                              .order_by(InstanceSteps.id)).all()
    db.session.rollback()
    assert len(rows) == 2
    assert [{k: v for k, v in row._asdict().items() if k != "id"} for row in rows] == \
        [{"tenant_id": tenant_id, "instance_id": instance_id, "steps": steps}] * 2


# -- PostgreSQL's single statements against the general path's statements -------------------------

class _GeneralPath(writes.SessionExecutor):
    """The session's executor made to run the general path (one statement per row, as on SQLite)."""

    def __init__(self):
        super().__init__()
        self.postgres = False


SAVED = {"status": "completed", "state": '{"x": 1}', "variables": {"amount": 60, "total": 120},
         "waiting_for": [], "output_keys": ["total"], "error": None, "revision": 1,
         "called_definitions": {"sub": 3}, "completed_at": None}


def _leased_start(tenant_id: int, definition_id: int, worker: str = "me") -> tuple[int, int]:
    instance_id = writes.create_instance(writes.SessionExecutor(), tenant_id, definition_id, VARIABLES, START)
    db.session.execute(update(Job).where(Job.instance_id == instance_id).values(locked_by=worker))
    job_id = db.session.execute(select(Job.id).where(Job.instance_id == instance_id)).scalar_one()
    db.session.commit()
    return instance_id, job_id


def test_the_single_statement_start_writes_the_rows_of_the_general_path(definition, backend):
    tenant_id, definition_id = definition
    with writes.short_transaction(db.engine, None, single_write=True) as executor:
        single = writes.create_instance(executor, tenant_id, definition_id, VARIABLES, START,
                                        {"start_event": "s1"})
    general = writes.create_instance(_GeneralPath(), tenant_id, definition_id, VARIABLES, START,
                                     {"start_event": "s1"})
    db.session.commit()
    assert _comparable(*_rows(single)) == _comparable(*_rows(general))
    instance, job = _rows(single)
    assert job["instance_id"] == instance["id"] == single and job["payload"]["start_event"] == "s1"
    assert instance["started_at"] <= job["run_at"] and job["attempts"] == 0 and job["locked_by"] is None


def test_the_single_statement_save_writes_the_rows_of_the_general_path(definition, backend):
    tenant_id, definition_id = definition
    (single, single_job), (general, general_job) = (_leased_start(tenant_id, definition_id) for _ in range(2))
    with writes.short_transaction(db.engine, None, single_write=True) as executor:
        writes.save_advance(executor, single, 0, SAVED, single_job, "me")
    writes.save_advance(_GeneralPath(), general, 0, SAVED, general_job, "me")
    db.session.commit()

    def saved(instance_id):
        row = db.session.execute(select(Instance.__table__).where(Instance.id == instance_id)).one()._asdict()
        jobs_left = db.session.execute(select(Job.id).where(Job.instance_id == instance_id)).all()
        db.session.rollback()
        assert row.pop("id") and row.pop("started_at")
        return row, jobs_left

    assert saved(single) == saved(general)
    assert saved(single)[0]["variables"] == SAVED["variables"] and saved(single)[1] == []


@pytest.mark.parametrize("path", ["single", "general"])
def test_a_save_whose_lease_or_revision_is_lost_writes_nothing(definition, path):
    tenant_id, definition_id = definition
    (stolen, stolen_job), (moved, moved_job) = (_leased_start(tenant_id, definition_id) for _ in range(2))
    db.session.execute(update(Job).where(Job.id == stolen_job).values(locked_by="another worker"))
    db.session.execute(update(Instance).where(Instance.id == moved).values(revision=5))
    db.session.commit()
    for instance_id, job_id in ((stolen, stolen_job), (moved, moved_job)):
        with pytest.raises(writes.Lost):
            if path == "single":
                with writes.short_transaction(db.engine, None, single_write=True) as executor:
                    writes.save_advance(executor, instance_id, 0, SAVED, job_id, "me")
            else:
                writes.save_advance(_GeneralPath(), instance_id, 0, SAVED, job_id, "me")
        db.session.rollback()
        # Neither the instance nor the job changed: the job's effect will be applied exactly once.
        assert db.session.get(Instance, instance_id).status == "running"
        assert db.session.get(Job, job_id) is not None
        db.session.rollback()


def test_a_save_wakes_for_the_instance_job_it_held_back(definition):
    tenant_id, definition_id = definition
    instance_id, job_id = _leased_start(tenant_id, definition_id)
    writes.add_job(writes.SessionExecutor(), tenant_id, "message", instance_id=instance_id)
    db.session.commit()
    woken = []
    with writes.short_transaction(db.engine, woken.append, single_write=True) as executor:
        writes.save_advance(executor, instance_id, 0, {**SAVED, "status": "running"}, job_id, "me")
    assert woken == [Counter({"message": 1})]


def test_a_single_write_transaction_refuses_a_second_write(definition, backend):
    tenant_id, definition_id = definition
    if backend != "postgresql":  # SQLite runs every short transaction in BEGIN IMMEDIATE
        return
    with pytest.raises(RuntimeError, match="second write"):
        with writes.short_transaction(db.engine, None, single_write=True) as executor:
            writes.create_instance(executor, tenant_id, definition_id, {}, START)
            writes.add_job(executor, tenant_id, "message")
