"""The writes of the hot paths (``engine.store.writes``): the same writes through a unit of work
on the ORM session and one on the driver connection must write the same rows; a failed unit of
work on the driver rolls back, wakes nobody and gives the SQLite write lock back; a lost
compare-and-swap or lease writes nothing."""
from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import select, update

from engine.jobs.kinds import START
from engine.store import writes
from engine.store.db import db
from engine.store.driver import DriverTransaction, Statement
from engine.store.models import Instance, InstanceSteps, Job
from engine.store.unit_of_work import Units
from tests.unit.conftest import deploy_for_new_tenant


def on_driver(wakers=None, *, single_write: bool = False):
    """A unit of work on the driver connection, as the webhook door, a claim and a plain save run."""
    return Units(wakers, engine=db.engine).begin("test", on_driver=True, single_write=single_write)

VARIABLES = {"amount": 60, "text": "é ✓", "none": None, "nested": {"list": [1, 2.5, True]}}


@pytest.fixture
def definition(app, uow):
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "webhook_order.bpmn")
        uow.rollback()  # no transaction (nor SQLite write lock) held by this thread
        yield tenant_id, deployed["definition_id"]
        uow.rollback()
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


def test_a_unit_of_work_on_the_driver_writes_the_rows_the_session_writes(definition, uow):
    tenant_id, definition_id = definition
    woken = []
    with on_driver(woken.append) as driver:
        short = writes.create_instance(driver, tenant_id, definition_id, VARIABLES, START)
    session = writes.create_instance(uow, tenant_id, definition_id, VARIABLES, START)
    uow.commit()

    assert woken == [Counter({START: 1})]  # after the commit, once
    short_instance, short_job = _rows(short)
    assert short_instance["variables"] == VARIABLES and short_instance["tenant_id"] == tenant_id
    assert short_job["payload"] == {"variables": VARIABLES} and short_job["attempts"] == 0
    assert _comparable(*_rows(short)) == _comparable(*_rows(session))


def test_a_failed_unit_of_work_on_the_driver_writes_nothing_and_wakes_nobody(definition, uow):
    tenant_id, definition_id = definition
    before = uow.session.execute(select(Instance.id)).all()
    uow.rollback()
    woken = []
    with pytest.raises(ZeroDivisionError):
        with on_driver(woken.append) as driver:
            writes.create_instance(driver, tenant_id, definition_id, VARIABLES, START)
            1 / 0
    assert woken == []
    assert uow.session.execute(select(Instance.id)).all() == before
    uow.rollback()
    # The write lock is free again (a held one would make this wait BUSY_TIMEOUT_S, then fail).
    with on_driver() as driver:
        writes.create_instance(driver, tenant_id, definition_id, VARIABLES, START)


def test_a_failed_driver_transaction_rolls_back_and_releases_the_lock(definition, uow):
    transaction = DriverTransaction(db.engine)
    with pytest.raises(Exception):
        transaction.run(Statement(select(Job.id).where(Job.id == 1), writes=False), {})  # fine
        transaction.execute("INSERT INTO no_such_table VALUES (1)")
    transaction.rollback()
    # The lock is free again: the ORM's own transactions still write (a held lock would make this
    # wait BUSY_TIMEOUT_S, then fail).
    tenant_id, definition_id = definition
    assert writes.create_instance(uow, tenant_id, definition_id, {}, START) > 0
    uow.commit()


def test_a_save_on_a_moved_revision_is_lost_and_writes_nothing(definition, uow):
    tenant_id, definition_id = definition
    instance_id = writes.create_instance(uow, tenant_id, definition_id, {}, START)
    uow.session.execute(update(Instance).where(Instance.id == instance_id).values(revision=3))
    uow.commit()
    with pytest.raises(writes.Lost):
        with on_driver() as driver:
            writes.save_instance(driver, instance_id, 2, {
                "status": "completed", "state": None, "variables": {"x": 1}, "waiting_for": [], "output_keys": None,
                "error": None, "revision": 3, "called_definitions": None, "completed_at": None})
    assert uow.session.get(Instance, instance_id).status == "running"
    uow.rollback()


def test_finishing_a_job_leased_to_another_worker_is_lost(definition, uow):
    tenant_id, definition_id = definition
    instance_id = writes.create_instance(uow, tenant_id, definition_id, {}, START)
    uow.session.execute(update(Job).where(Job.instance_id == instance_id).values(locked_by="other"))
    uow.commit()
    job_id = uow.session.execute(select(Job.id).where(Job.instance_id == instance_id)).scalar_one()
    uow.rollback()
    with pytest.raises(writes.Lost):
        with on_driver() as driver:
            writes.finish_job(driver, job_id, "me", instance_id)
    assert uow.session.get(Job, job_id) is not None
    uow.rollback()


def test_finishing_a_job_wakes_for_the_instance_job_it_held_back(definition, uow):
    tenant_id, definition_id = definition
    instance_id = writes.create_instance(uow, tenant_id, definition_id, {}, START)
    writes.add_job(uow, tenant_id, "message", instance_id=instance_id)
    uow.session.execute(update(Job).where(Job.instance_id == instance_id, Job.kind == START).values(locked_by="me"))
    uow.commit()
    job_id = uow.session.execute(select(Job.id).where(Job.instance_id == instance_id, Job.kind == START)).scalar_one()
    uow.rollback()
    woken = []
    with on_driver(woken.append) as driver:
        writes.finish_job(driver, job_id, "me", instance_id)
    assert woken == [Counter({"message": 1})]


def test_path_steps_are_the_same_rows_through_either_backing(definition, uow):
    tenant_id, definition_id = definition
    steps = [[1795511533.8099885, "big_loop", "wait", "again", 64], [1795511533.81, "big_loop", "count", None, 256]]
    with on_driver() as driver:
        instance_id = writes.create_instance(driver, tenant_id, definition_id, {}, START)
        writes.add_path_steps(driver, tenant_id, instance_id, steps)
        writes.add_path_steps(driver, tenant_id, instance_id, [])  # nothing pruned: no row
    writes.add_path_steps(uow, tenant_id, instance_id, steps)
    uow.commit()

    rows = uow.session.execute(select(InstanceSteps.__table__).where(InstanceSteps.instance_id == instance_id)
                              .order_by(InstanceSteps.id)).all()
    uow.rollback()
    assert len(rows) == 2
    assert [{k: v for k, v in row._asdict().items() if k != "id"} for row in rows] == \
        [{"tenant_id": tenant_id, "instance_id": instance_id, "steps": steps}] * 2


# -- PostgreSQL's single statements against the general path's statements -------------------------

def general_path(uow):
    """The unit of work made to run the general path (one statement per row, as on SQLite)."""
    uow.postgres = False
    return uow


SAVED = {"status": "completed", "state": '{"x": 1}', "variables": {"amount": 60, "total": 120},
         "waiting_for": [], "output_keys": ["total"], "error": None, "revision": 1,
         "called_definitions": {"sub": 3}, "completed_at": None}


def _leased_start(uow, tenant_id: int, definition_id: int, worker: str = "me") -> tuple[int, int]:
    instance_id = writes.create_instance(uow, tenant_id, definition_id, VARIABLES, START)
    uow.session.execute(update(Job).where(Job.instance_id == instance_id).values(locked_by=worker))
    job_id = uow.session.execute(select(Job.id).where(Job.instance_id == instance_id)).scalar_one()
    uow.commit()
    return instance_id, job_id


def test_the_single_statement_start_writes_the_rows_of_the_general_path(definition, backend, uow):
    tenant_id, definition_id = definition
    with on_driver(single_write=True) as driver:
        single = writes.create_instance(driver, tenant_id, definition_id, VARIABLES, START,
                                        {"start_event": "s1"})
    general = writes.create_instance(general_path(uow), tenant_id, definition_id, VARIABLES, START,
                                     {"start_event": "s1"})
    uow.commit()
    assert _comparable(*_rows(single)) == _comparable(*_rows(general))
    instance, job = _rows(single)
    assert job["instance_id"] == instance["id"] == single and job["payload"]["start_event"] == "s1"
    assert instance["started_at"] <= job["run_at"] and job["attempts"] == 0 and job["locked_by"] is None


def test_the_single_statement_save_writes_the_rows_of_the_general_path(definition, backend, uow):
    tenant_id, definition_id = definition
    (single, single_job), (general, general_job) = (_leased_start(uow, tenant_id, definition_id) for _ in range(2))
    with on_driver(single_write=True) as driver:
        writes.save_advance(driver, single, 0, SAVED, single_job, "me")
    writes.save_advance(general_path(uow), general, 0, SAVED, general_job, "me")
    uow.commit()

    def saved(instance_id):
        row = uow.session.execute(select(Instance.__table__).where(Instance.id == instance_id)).one()._asdict()
        jobs_left = uow.session.execute(select(Job.id).where(Job.instance_id == instance_id)).all()
        uow.rollback()
        assert row.pop("id") and row.pop("started_at")
        return row, jobs_left

    assert saved(single) == saved(general)
    assert saved(single)[0]["variables"] == SAVED["variables"] and saved(single)[1] == []


@pytest.mark.parametrize("path", ["single", "general"])
def test_a_save_whose_lease_or_revision_is_lost_writes_nothing(definition, path, uow):
    tenant_id, definition_id = definition
    (stolen, stolen_job), (moved, moved_job) = (_leased_start(uow, tenant_id, definition_id) for _ in range(2))
    uow.session.execute(update(Job).where(Job.id == stolen_job).values(locked_by="another worker"))
    uow.session.execute(update(Instance).where(Instance.id == moved).values(revision=5))
    uow.commit()
    for instance_id, job_id in ((stolen, stolen_job), (moved, moved_job)):
        with pytest.raises(writes.Lost):
            if path == "single":
                with on_driver(single_write=True) as driver:
                    writes.save_advance(driver, instance_id, 0, SAVED, job_id, "me")
            else:
                writes.save_advance(general_path(uow), instance_id, 0, SAVED, job_id, "me")
        uow.rollback()
        # Neither the instance nor the job changed: the job's effect will be applied exactly once.
        assert uow.session.get(Instance, instance_id).status == "running"
        assert uow.session.get(Job, job_id) is not None
        uow.rollback()


def test_a_save_wakes_for_the_instance_job_it_held_back(definition, uow):
    tenant_id, definition_id = definition
    instance_id, job_id = _leased_start(uow, tenant_id, definition_id)
    writes.add_job(uow, tenant_id, "message", instance_id=instance_id)
    uow.commit()
    woken = []
    with on_driver(woken.append, single_write=True) as driver:
        writes.save_advance(driver, instance_id, 0, {**SAVED, "status": "running"}, job_id, "me")
    assert woken == [Counter({"message": 1})]


def test_a_single_write_transaction_refuses_a_second_write(definition, backend, uow):
    tenant_id, definition_id = definition
    if backend != "postgresql":  # SQLite runs every short transaction in BEGIN IMMEDIATE
        return
    with pytest.raises(RuntimeError, match="second write"):
        with on_driver(single_write=True) as driver:
            writes.create_instance(driver, tenant_id, definition_id, {}, START)
            writes.add_job(driver, tenant_id, "message")


@pytest.mark.parametrize("path", ["single", "general"])
def test_a_save_that_ends_the_instance_writes_its_history_event_only_when_it_saves(definition, path, uow):
    from engine.store import history
    from engine.store.models import HistoryEvent
    from engine.store.unit_of_work import SYSTEM

    tenant_id, definition_id = definition
    (saved_one, saved_job), (lost_one, lost_job) = (_leased_start(uow, tenant_id, definition_id) for _ in range(2))
    uow.session.execute(update(Instance).where(Instance.id == lost_one).values(revision=5))
    uow.commit()
    for instance_id, job_id in ((saved_one, saved_job), (lost_one, lost_job)):
        event = history.event(tenant_id=tenant_id, instance_id=instance_id, kind="failed", actor=SYSTEM,
                              element_id="divide", detail={"message": "boom"})
        try:
            if path == "single":
                with on_driver(single_write=True) as driver:
                    writes.save_advance(driver, instance_id, 0, {**SAVED, "status": "failed"}, job_id, "me", event)
            else:
                writes.save_advance(general_path(uow), instance_id, 0, {**SAVED, "status": "failed"}, job_id, "me",
                                    event)
                uow.commit()
        except writes.Lost:
            uow.rollback()

    def ended(instance_id):
        rows = uow.session.execute(select(HistoryEvent.kind, HistoryEvent.element_id, HistoryEvent.actor,
                                          HistoryEvent.detail)
                                   .where(HistoryEvent.instance_id == instance_id, HistoryEvent.kind != "started")).all()
        uow.rollback()
        return [tuple(row) for row in rows]

    assert ended(saved_one) == [("failed", "divide", {"type": "system", "name": "baton"}, {"message": "boom"})]
    assert ended(lost_one) == []
