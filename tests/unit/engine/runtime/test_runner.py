"""``Runner.advance`` on a real database, the test playing the worker (``jobs.claim``): an advance
that writes only the instance and its job saves in a short transaction of its own, and writes
what the session's transaction would; a save on a moved revision or a lost lease is discarded
and the job goes back to the queue. In a batch (``begin_batch``/``end_batch``) those saves wait
for its end and commit in one transaction, each still all or nothing."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select, text, update

from engine import instances, jobs
from engine.runtime.runner import Runner
from engine.store import writes
from engine.store.db import db
from engine.store.models import Instance, Job
from engine.store.workflows import SpecCache
from tests.unit.conftest import deploy_for_new_tenant

WORKER = "unit-worker"


@pytest.fixture
def started(app):
    """A function that starts ``count`` instances of ``order`` and claims their start jobs."""
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant("webhook_order.bpmn")
        definition = instances.resolve_definition(tenant_id, deployed["definition_id"])

        def start(count: int) -> list[jobs.ClaimedJob]:
            ids = [instances.start(tenant_id, definition, {"amount": 60})["instance_id"] for _ in range(count)]
            claimed = jobs.claim(WORKER, 30, limit=count)
            assert sorted(job.instance_id for job in claimed) == sorted(ids)
            return sorted(claimed, key=lambda job: job.instance_id)

        yield start
        db.session.rollback()
        db.session.remove()


@pytest.fixture
def runner(script_engine):
    return Runner(script_engine, SpecCache(), wakers=None, public_url="http://127.0.0.1")


def _saved_row(instance_id: int) -> dict:
    row = db.session.execute(select(Instance.__table__).where(Instance.id == instance_id)).one()._asdict()
    db.session.rollback()
    for key in ("id", "started_at", "completed_at"):
        assert row.pop(key) is not None
    state = json.loads(row.pop("state"))  # task ids and times differ from instance to instance
    row["state"] = (state["data"], sorted(state), len(state["tasks"]))
    return row


def test_a_short_save_writes_what_the_session_save_writes(started, runner, monkeypatch):
    short, full = started(2)
    transactions = []
    original = writes.short_transaction
    monkeypatch.setattr(writes, "short_transaction", lambda *a, **k: transactions.append(1) or original(*a, **k))
    runner.advance(short, WORKER)
    assert transactions == [1]
    # The same advance through the session's transaction (as when it has rows of its own to write).
    monkeypatch.setattr(Runner, "_rows_to_write", lambda self, advance: [lambda: None])
    runner.advance(full, WORKER)
    assert transactions == [1]

    assert _saved_row(short.instance_id)["status"] == "completed"
    assert _saved_row(short.instance_id) == _saved_row(full.instance_id)
    assert db.session.execute(select(Job.id).where(Job.id.in_([short.id, full.id]))).all() == []
    db.session.rollback()


def test_a_save_on_a_moved_revision_or_a_lost_lease_is_discarded(started, runner):
    moved, lost, fine = started(3)
    db.session.execute(update(Instance).where(Instance.id == moved.instance_id).values(revision=Instance.revision + 1))
    db.session.execute(update(Job).where(Job.id == lost.id).values(locked_by="another-worker"))
    db.session.commit()

    for job in (moved, lost, fine):
        runner.advance(job, WORKER)

    statuses = dict(db.session.execute(select(Instance.id, Instance.status).where(
        Instance.id.in_([moved.instance_id, lost.instance_id, fine.instance_id]))).all())
    assert statuses == {moved.instance_id: "running", lost.instance_id: "running", fine.instance_id: "completed"}
    left = dict(db.session.execute(select(Job.id, Job.locked_by).where(Job.id.in_([moved.id, lost.id, fine.id]))).all())
    # The moved instance's job is back in the queue (released, tried again with a fresh read);
    # the lost lease's job still belongs to the other worker; the third one is done.
    assert left == {moved.id: None, lost.id: "another-worker"}
    db.session.rollback()
    [again] = jobs.claim(WORKER, 30, limit=5)
    assert again.id == moved.id
    runner.advance(again, WORKER)
    assert db.session.get(Instance, moved.instance_id).status == "completed"
    db.session.rollback()


def _statuses(claimed: list[jobs.ClaimedJob]) -> dict[int, tuple[str, int]]:
    rows = db.session.execute(select(Instance.id, Instance.status, Instance.revision).where(
        Instance.id.in_([job.instance_id for job in claimed]))).all()
    db.session.rollback()
    return {row.id: (row.status, row.revision) for row in rows}


def test_a_batch_saves_at_its_end_in_one_transaction_what_single_saves_write(started, runner, monkeypatch):
    single, *batch = started(4)
    runner.advance(single, WORKER)
    transactions = []
    original = writes.short_transaction
    monkeypatch.setattr(writes, "short_transaction", lambda *a, **k: transactions.append(1) or original(*a, **k))

    runner.begin_batch(WORKER)
    for job in batch:
        runner.advance(job, WORKER)
    assert set(_statuses(batch).values()) == {("running", 0)} and transactions == []  # nothing saved yet
    assert runner.end_batch(WORKER) == []

    assert transactions == [1]
    for job in batch:
        assert _saved_row(job.instance_id) == _saved_row(single.instance_id)
    assert db.session.execute(select(Job.id).where(Job.id.in_([job.id for job in batch]))).all() == []
    db.session.rollback()


def test_a_lost_save_in_a_batch_leaves_the_others_saved(started, runner):
    """On SQLite a save is two statements: with the lease lost, the instance's update (the first)
    is rolled back to its savepoint; the batch's other saves stay."""
    moved, lost, fine = started(3)
    db.session.execute(update(Instance).where(Instance.id == moved.instance_id).values(revision=Instance.revision + 1))
    db.session.execute(update(Job).where(Job.id == lost.id).values(locked_by="another-worker"))
    db.session.commit()

    runner.begin_batch(WORKER)
    for job in (moved, lost, fine):
        runner.advance(job, WORKER)
    assert runner.end_batch(WORKER) == []

    assert _statuses([moved, lost, fine]) == {moved.instance_id: ("running", 1), lost.instance_id: ("running", 0),
                                              fine.instance_id: ("completed", 1)}
    left = dict(db.session.execute(select(Job.id, Job.locked_by).where(Job.id.in_([moved.id, lost.id, fine.id]))).all())
    assert left == {moved.id: None, lost.id: "another-worker"}
    db.session.rollback()


def test_a_batch_whose_commit_fails_saves_none_and_returns_every_job(started, runner, backend):
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
        db.session.execute(text(sql))
    db.session.commit()
    try:
        runner.begin_batch(WORKER)
        for job in (first, refused, last):
            runner.advance(job, WORKER)
        failed = runner.end_batch(WORKER)
    finally:
        for sql in drop:
            db.session.execute(text(sql))
        db.session.commit()

    assert [job.id for job, _error in failed] == [first.id, refused.id, last.id]
    assert set(_statuses([first, refused, last]).values()) == {("running", 0)}
    held = db.session.execute(select(Job.locked_by).where(Job.id.in_([first.id, refused.id, last.id]))).scalars().all()
    assert held == [WORKER] * 3  # still leased: the worker tries them again (WorkerPool._failed)
    db.session.rollback()
