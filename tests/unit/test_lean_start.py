"""The plain webhook start (``webhooks.start_plain``): on SQLite it runs its statements on the
driver connection (``db.DriverStatement`` inside ``db.sqlite_write``), elsewhere through
SQLAlchemy Core. Both must write the same rows, and a failed SQLite write must roll back and give
the write lock back."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from engine import webhooks
from engine.db import db, sqlite_write
from engine.models import Instance, Job
from tests.unit.conftest import deploy_for_new_tenant

VARIABLES = {"amount": 60, "text": "é ✓", "none": None, "nested": {"list": [1, 2.5, True]}}


@pytest.fixture
def route(app):
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant("webhook_order.bpmn")
        ids = tenant_id, deployed["definition_id"], deployed["webhooks"][0]["webhook_id"]
        db.session.rollback()  # no transaction (nor SQLite write lock) held by this thread
        yield ids
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


def test_the_plain_start_writes_the_rows_of_the_core_path(route):
    tenant_id, definition_id, webhook_id = route
    lean = webhooks.start_plain(db.engine, webhook_id, VARIABLES)
    core = webhooks._start_plain_core(db.engine, webhook_id, VARIABLES)

    assert lean == {"instance_id": lean["instance_id"], "status": "running", "definition_id": definition_id}
    assert core["instance_id"] != lean["instance_id"]
    lean_instance, lean_job = _rows(lean["instance_id"])
    assert lean_instance["variables"] == VARIABLES and lean_instance["tenant_id"] == tenant_id
    assert lean_job["payload"] == {"variables": VARIABLES} and lean_job["attempts"] == 0
    assert _comparable(*_rows(lean["instance_id"])) == _comparable(*_rows(core["instance_id"]))


def test_an_unknown_route_writes_nothing_and_hands_over_to_the_full_path(route):
    before = db.session.execute(select(Instance.id)).all()
    db.session.rollback()
    assert webhooks.start_plain(db.engine, "no-such-webhook", VARIABLES) is None
    assert db.session.execute(select(Instance.id)).all() == before


def test_a_failed_sqlite_write_rolls_back_and_releases_the_write_lock(route, backend):
    tenant_id, definition_id, webhook_id = route
    if backend != "sqlite":  # the driver-level write path is SQLite's alone
        with pytest.raises(RuntimeError, match="needs a SQLite engine"):
            with sqlite_write(db.engine):
                pass
        return
    with pytest.raises(ZeroDivisionError):
        with sqlite_write(db.engine) as connection:
            connection.execute("DELETE FROM jobs")
            1 / 0
    with pytest.raises(Exception):
        with sqlite_write(db.engine) as connection:
            connection.execute("INSERT INTO no_such_table VALUES (1)")
    # The lock is free again (a held one would make this wait BUSY_TIMEOUT_S, then fail), and
    # the ORM's own transactions still work.
    started = webhooks.start_plain(db.engine, webhook_id, VARIABLES)
    assert started is not None
    assert db.session.get(Instance, started["instance_id"]).status == "running"
    db.session.rollback()


# -- the plain save of an advance (Runner._save_plain) ---------------------------------------

def _claimed(webhook_id: str, count: int) -> list:
    from engine import jobs

    started = [webhooks.start_plain(db.engine, webhook_id, VARIABLES)["instance_id"] for _ in range(count)]
    claimed = jobs.claim(WORKER, 30, limit=count)
    assert sorted(job.instance_id for job in claimed) == sorted(started)
    return sorted(claimed, key=lambda job: job.instance_id)


WORKER = "unit-worker"


def _saved_row(instance_id: int) -> dict:
    row = db.session.execute(select(Instance.__table__).where(Instance.id == instance_id)).one()._asdict()
    db.session.rollback()
    for key in ("id", "started_at", "completed_at"):
        assert row.pop(key) is not None
    state = json.loads(row.pop("state"))  # task ids and times differ from instance to instance
    row["state"] = (state["data"], sorted(state), len(state["tasks"]))
    return row


def test_a_plain_save_writes_what_the_session_save_writes(route, script_engine, monkeypatch):
    from engine.runner import Runner
    from engine.store import SpecCache

    _tenant_id, _definition_id, webhook_id = route
    runner = Runner(script_engine, SpecCache())
    plain, regular = _claimed(webhook_id, 2)
    calls = []
    original = Runner._save_plain
    monkeypatch.setattr(Runner, "_save_plain", lambda *a: calls.append(a[1].id) or original(*a))
    runner.advance(plain, WORKER)
    monkeypatch.setattr(Runner, "_saves_plainly", staticmethod(lambda *a: False))
    runner.advance(regular, WORKER)

    sqlite = db.engine.dialect.name == "sqlite"
    assert calls == ([plain.id] if sqlite else [])
    assert _saved_row(plain.instance_id)["status"] == "completed"
    assert _saved_row(plain.instance_id) == _saved_row(regular.instance_id)
    assert db.session.execute(select(Job.id)).all() == []  # both jobs finished
    db.session.rollback()


def test_a_plain_save_on_a_changed_revision_or_a_lost_lease_is_discarded(route, script_engine):
    from sqlalchemy import update

    from engine import jobs
    from engine.runner import Runner
    from engine.store import SpecCache

    _tenant_id, _definition_id, webhook_id = route
    runner = Runner(script_engine, SpecCache())
    moved, lost, fine = _claimed(webhook_id, 3)
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
