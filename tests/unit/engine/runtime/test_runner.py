"""``Runner.advance`` on a real database, the test playing the worker (a claim, then the job as
``engine.jobs.worker.run_job`` runs it): an advance that no contributor adds to saves on the driver
connection, and writes what a save through the ORM session writes; a save on a moved revision or a
lost lease is discarded and the job goes back to the queue. In a batch (``begin_batch``, then
``end_batch``) those saves wait for its end and commit in one unit of work, each still all or nothing."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select, text, update

from app import advance_contributors
from engine import instances, jobs
from engine.jobs.worker import end_batch, run_job
from engine.runtime.runner import Runner
from engine.store import unit_of_work
from engine.store.db import db
from engine.store.driver import DriverTransaction
from engine.store.models import Instance, Job
from engine.store.workflows import SpecCache
from tests.unit.conftest import claim, deploy_for_new_tenant

WORKER = "unit-worker"


@pytest.fixture
def started(app, uow):
    """A function that starts ``count`` instances of ``order`` and claims their start jobs."""
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "webhook_order.bpmn")
        definition = instances.resolve_definition(uow, tenant_id, deployed["definition_id"])

        def start(count: int) -> list[jobs.ClaimedJob]:
            ids = [instances.start(uow, tenant_id, definition, {"amount": 60})["instance_id"] for _ in range(count)]
            claimed = claim(uow, WORKER, 30, limit=count)
            assert sorted(job.instance_id for job in claimed) == sorted(ids)
            return sorted(claimed, key=lambda job: job.instance_id)

        yield start
        uow.rollback()
        db.session.remove()


@pytest.fixture
def units(app):
    return app.extensions["baton.units"]


@pytest.fixture
def driver_commits(monkeypatch) -> list[int]:
    """Counts the transactions committed on the driver connection (the plain saves')."""
    committed: list[int] = []

    class Counted(DriverTransaction):
        def commit(self) -> None:
            super().commit()
            committed.append(1)

    monkeypatch.setattr(unit_of_work, "DriverTransaction", Counted)
    return committed


class _WritesSomething:
    """A contributor that adds a write to every advance: its save goes through the ORM session."""

    def contribute(self, advance):
        return lambda uow: None


@pytest.fixture
def runner(script_engine):
    return Runner(script_engine, SpecCache(), advance_contributors("http://127.0.0.1"))


def _saved_row(instance_id: int) -> dict:
    row = db.session.execute(select(Instance.__table__).where(Instance.id == instance_id)).one()._asdict()
    db.session.rollback()
    for key in ("id", "started_at", "completed_at"):
        assert row.pop(key) is not None
    state = json.loads(row.pop("state"))  # task ids and times differ from instance to instance
    row["state"] = (state["data"], sorted(state), len(state["tasks"]))
    return row


def test_a_plain_save_writes_what_the_session_save_writes(started, runner, units, driver_commits, script_engine):
    plain, full = started(2)
    run_job(units, runner, plain, WORKER)
    assert driver_commits == [1]
    # The same advance through the ORM session (as when a contributor has rows to write).
    writing = Runner(script_engine, SpecCache(), (*advance_contributors("http://127.0.0.1"), _WritesSomething()))
    run_job(units, writing, full, WORKER)
    assert driver_commits == [1]

    assert _saved_row(plain.instance_id)["status"] == "completed"
    assert _saved_row(plain.instance_id) == _saved_row(full.instance_id)
    assert db.session.execute(select(Job.id).where(Job.id.in_([plain.id, full.id]))).all() == []
    db.session.rollback()


def test_a_save_on_a_moved_revision_or_a_lost_lease_is_discarded(started, runner, units, uow):
    moved, lost, fine = started(3)
    uow.session.execute(update(Instance).where(Instance.id == moved.instance_id).values(revision=Instance.revision + 1))
    uow.session.execute(update(Job).where(Job.id == lost.id).values(locked_by="another-worker"))
    uow.commit()

    for job in (moved, lost, fine):
        run_job(units, runner, job, WORKER)

    statuses = dict(uow.session.execute(select(Instance.id, Instance.status).where(
        Instance.id.in_([moved.instance_id, lost.instance_id, fine.instance_id]))).all())
    assert statuses == {moved.instance_id: "running", lost.instance_id: "running", fine.instance_id: "completed"}
    left = dict(uow.session.execute(select(Job.id, Job.locked_by).where(Job.id.in_([moved.id, lost.id, fine.id]))).all())
    # The moved instance's job is back in the queue (released, tried again with a fresh read);
    # the lost lease's job still belongs to the other worker; the third one is done.
    assert left == {moved.id: None, lost.id: "another-worker"}
    uow.rollback()
    [again] = claim(uow, WORKER, 30, limit=5)
    assert again.id == moved.id
    run_job(units, runner, again, WORKER)
    assert uow.session.get(Instance, moved.instance_id).status == "completed"
    uow.rollback()


def _statuses(claimed: list[jobs.ClaimedJob]) -> dict[int, tuple[str, int]]:
    rows = db.session.execute(select(Instance.id, Instance.status, Instance.revision).where(
        Instance.id.in_([job.instance_id for job in claimed]))).all()
    db.session.rollback()
    return {row.id: (row.status, row.revision) for row in rows}


def test_a_batch_saves_at_its_end_in_one_transaction_what_single_saves_write(started, runner, units,
                                                                            driver_commits):
    single, *batch = started(4)
    run_job(units, runner, single, WORKER)
    driver_commits.clear()

    runner.begin_batch(WORKER)
    for job in batch:
        run_job(units, runner, job, WORKER)
    assert set(_statuses(batch).values()) == {("running", 0)} and driver_commits == []  # nothing saved yet
    assert end_batch(units, runner, WORKER) == []

    assert driver_commits == [1]
    for job in batch:
        assert _saved_row(job.instance_id) == _saved_row(single.instance_id)
    assert db.session.execute(select(Job.id).where(Job.id.in_([job.id for job in batch]))).all() == []
    db.session.rollback()


def test_a_lost_save_in_a_batch_leaves_the_others_saved(started, runner, units, uow):
    """On SQLite a save is two statements: with the lease lost, the instance's update (the first)
    is rolled back to its savepoint; the batch's other saves stay."""
    moved, lost, fine = started(3)
    uow.execute(update(Instance).where(Instance.id == moved.instance_id).values(revision=Instance.revision + 1))
    uow.execute(update(Job).where(Job.id == lost.id).values(locked_by="another-worker"))
    uow.commit()

    runner.begin_batch(WORKER)
    for job in (moved, lost, fine):
        run_job(units, runner, job, WORKER)
    assert end_batch(units, runner, WORKER) == []

    assert _statuses([moved, lost, fine]) == {moved.instance_id: ("running", 1), lost.instance_id: ("running", 0),
                                              fine.instance_id: ("completed", 1)}
    left = dict(uow.session.execute(select(Job.id, Job.locked_by).where(Job.id.in_([moved.id, lost.id, fine.id]))).all())
    assert left == {moved.id: None, lost.id: "another-worker"}
    uow.rollback()


def test_a_batch_whose_commit_fails_saves_none_and_returns_every_job(started, runner, units, uow, backend):
    first, refused, last = started(3)
    # The database itself refuses the second save (a trigger): the transaction fails as a whole.
    if backend == "sqlite":
        create = [f"CREATE TRIGGER refuse_save BEFORE UPDATE ON instances WHEN NEW.id = {refused.instance_id} "
                  "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"]
        drop = ["DROP TRIGGER refuse_save"]
    else:
        create = ["CREATE FUNCTION refuse_save() RETURNS trigger LANGUAGE plpgsql AS "
                  "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
                  f"CREATE TRIGGER refuse_save BEFORE UPDATE ON instances FOR EACH ROW "
                  f"WHEN (NEW.id = {refused.instance_id}) EXECUTE FUNCTION refuse_save()"]
        drop = ["DROP TRIGGER refuse_save ON instances", "DROP FUNCTION refuse_save()"]
    for sql in create:
        uow.execute(text(sql))
    uow.commit()
    try:
        runner.begin_batch(WORKER)
        for job in (first, refused, last):
            run_job(units, runner, job, WORKER)
        failed = end_batch(units, runner, WORKER)
    finally:
        for sql in drop:
            uow.execute(text(sql))
        uow.commit()

    assert [job.id for job, _error in failed] == [first.id, refused.id, last.id]
    assert set(_statuses([first, refused, last]).values()) == {("running", 0)}
    held = uow.session.execute(select(Job.locked_by).where(Job.id.in_([first.id, refused.id, last.id]))).scalars().all()
    assert held == [WORKER] * 3  # still leased: the worker tries them again (WorkerPool._failed)
    uow.rollback()
