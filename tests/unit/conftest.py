"""Fixtures shared by the unit tests: an in-process app on a real database, and a sandboxed
script engine for running BPMN in memory."""
from __future__ import annotations

import pytest

from app import create_app
from engine.db import db
from engine.sandbox import Sandbox, SandboxScriptEngine
from tests.conftest import make_database_url
from tests.harness import drop_postgres_database


@pytest.fixture(scope="module")
def app(backend, tmp_path_factory):
    """``create_app`` on a fresh SQLite or PostgreSQL database, with no worker threads: the test
    plays the worker (``jobs.claim``, then the runner)."""
    url = make_database_url(backend, tmp_path_factory)
    application = create_app({"database_url": url, "workers": 0, "allow_private_urls": "1"})
    yield application
    with application.app_context():
        db.engine.dispose()
    if backend == "postgresql":
        drop_postgres_database(url)


@pytest.fixture(scope="module")
def script_engine():
    sandbox = Sandbox(timeout_s=5, memory_mb=256, hosts=1)
    yield SandboxScriptEngine(sandbox)
    sandbox.close()
