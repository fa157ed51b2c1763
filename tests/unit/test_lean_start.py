"""The plain webhook start (``webhooks.start_plain``): on SQLite it runs its statements on the
driver connection (``db.DriverStatement`` inside ``db.sqlite_write``), elsewhere through
SQLAlchemy Core. Both must write the same rows, and a failed SQLite write must roll back and give
the write lock back."""
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import delete, select

from engine import definitions, webhooks
from engine.auth import create_tenant
from engine.db import db, sqlite_write
from engine.models import Instance, Job
from tests.harness import bpmn

VARIABLES = {"amount": 60, "text": "é ✓", "none": None, "nested": {"list": [1, 2.5, True]}}


@pytest.fixture
def route(app):
    with app.app_context():
        db.session.execute(delete(Job))
        db.session.commit()
        tenant, _key = create_tenant(f"t-{uuid.uuid4().hex[:10]}")
        deployed = definitions.deploy(tenant.id, bpmn("webhook_order.bpmn"), f"lean-{uuid.uuid4().hex[:6]}",
                                      public_url="http://127.0.0.1")
        db.session.commit()
        ids = tenant.id, deployed["definition_id"], deployed["webhooks"][0]["webhook_id"]
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
    if backend != "sqlite":
        pytest.skip("the driver-level write path is SQLite's")
    tenant_id, definition_id, webhook_id = route
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
