"""Fixtures shared by the unit tests: an in-process app on a real database, and a sandboxed
script engine for running BPMN in memory."""
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import delete

from app import create_app
from engine import definitions, jobs
from engine.auth import create_tenant
from engine.store.db import db
from engine.store.models import Job
from engine.store.unit_of_work import UnitOfWork
from engine.sandbox import Sandbox, SandboxScriptEngine
from engine.telemetry import context as log_context
from tests.conftest import make_database_url
from tests.harness import bpmn, drop_postgres_database, unit_of_work_of


@pytest.fixture(scope="session")
def app(backend, tmp_path_factory):
    """``create_app`` on a fresh SQLite or PostgreSQL database, once per backend for the whole run
    (its migrations are what cost), with no worker threads: the test plays the worker
    (``jobs.claim``, then the runner). Tests share it: each makes its own tenant, and leaves no
    transaction open (``_no_transaction_left``)."""
    url = make_database_url(backend, tmp_path_factory)
    application = create_app({"database_url": url, "workers": 0, "allow_private_urls": "1"})
    yield application
    with application.app_context():
        db.engine.dispose()
    if backend == "postgresql":
        drop_postgres_database(url)


@pytest.fixture(autouse=True)
def _log_ids_of_its_own():
    """Each test starts with no log ids bound and leaves none: code under test that sets the tenant
    for "the rest of its context" (a request's, in the server) would otherwise label later tests'."""
    with log_context.bound(**{name: None for name in log_context.FIELDS}):
        yield


@pytest.fixture(autouse=True)
def _no_transaction_left(request):
    """After each test that used the app, whatever it left uncommitted is rolled back and its
    session dropped, so the next test starts from what was committed."""
    yield
    application = getattr(request.node, "funcargs", {}).get("app")
    if application is not None and "sqlalchemy" in application.extensions:
        with application.app_context():
            db.session.rollback()
            db.session.remove()


@pytest.fixture
def uow(app):
    """The test's unit of work, reused after each ``commit`` or ``rollback`` (a unit of work starts
    its next transaction on first use); rolled back at the end. Its session is the app context's
    that is active where it is first used (a fixture's, or the test's own)."""
    unit = unit_of_work_of(app)
    yield unit
    unit.rollback()


@pytest.fixture(scope="module")
def script_engine():
    sandbox = Sandbox(timeout_s=5, memory_mb=256, hosts=1)
    yield SandboxScriptEngine(sandbox)
    sandbox.close()


def deploy_for_new_tenant(uow: UnitOfWork, name: str) -> tuple[int, dict]:
    """Inside an app context: no job left by an earlier test (the test plays the worker and claims
    whatever is due), a new tenant, and ``tests/bpmn/<name>`` deployed for it under a fresh code.
    Returns the tenant id and the deploy answer; committed."""
    uow.execute(delete(Job))
    tenant, _key = create_tenant(uow, f"t-{uuid.uuid4().hex[:10]}")
    deployed = definitions.deploy(uow, tenant.id, bpmn(name), f"p-{uuid.uuid4().hex[:8]}",
                                  public_url="http://127.0.0.1")
    uow.commit()
    return tenant.id, deployed


def claim(uow: UnitOfWork, worker_id: str, lease_seconds: float = 30, **options) -> list:
    """What a worker's claim does: lease ready jobs in a unit of work of its own, committed."""
    claimed = jobs.claim(uow, worker_id, lease_seconds, **options)
    uow.commit()
    return claimed
