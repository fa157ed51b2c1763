"""Fixtures: each integration test runs once on SQLite and once on PostgreSQL, through a real server."""
from __future__ import annotations

import os
import uuid

import pytest

from tests.harness import BatonServer, create_postgres_database, drop_postgres_database
from tests.receiver import Receiver

BACKENDS = ["sqlite", "postgresql"]


def make_database_url(backend: str, tmp_path_factory) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'baton.db'}"
    try:
        return create_postgres_database()
    except Exception as exc:  # noqa: BLE001 - any connection failure means "no PostgreSQL here"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL is required under CI=true and could not be reached: {exc}")
        pytest.skip(f"PostgreSQL not reachable: {exc}")


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def database_url(backend, tmp_path_factory):
    url = make_database_url(backend, tmp_path_factory)
    yield url
    if backend == "postgresql":
        drop_postgres_database(url)


@pytest.fixture
def own_database(backend, tmp_path_factory):
    """A fresh database for this test alone (dropped after it), for tests that kill and restart
    their own server and workers."""
    url = make_database_url(backend, tmp_path_factory)
    yield url
    if backend == "postgresql":
        drop_postgres_database(url)


@pytest.fixture(scope="session")
def server(database_url, tmp_path_factory):
    """One running server per backend for the whole session; tests use their own codes."""
    instance = BatonServer(database_url, tmp_path_factory.mktemp("server")).start()
    yield instance
    instance.stop()


@pytest.fixture(scope="session")
def admin_key(server) -> str:
    return server.create_tenant(f"tenant-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="session")
def other_tenant_key(server) -> str:
    return server.create_tenant(f"other-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def api(server, admin_key):
    return server.api(admin_key)


@pytest.fixture
def other_api(server, other_tenant_key):
    return server.api(other_tenant_key)


@pytest.fixture
def unique_code() -> str:
    return f"proc-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def receiver():
    """A real local HTTP receiver (webhook target) that answers 200; stopped after the test."""
    started = Receiver().start()
    yield started
    started.stop()
