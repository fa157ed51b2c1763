"""``Runner.advance`` on a real database, the test playing the worker (``jobs.claim``): an advance
that writes only the instance and its job saves in a short transaction of its own, and writes
what the session's transaction would; a save on a moved revision or a lost lease is discarded
and the job goes back to the queue."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select, update

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
