"""PostgreSQL's pooled connections are pinged only after sitting idle (``configure_postgres``): a
connection the server dropped while it idled is replaced before use; one in steady use is not
pinged, so a drop between two quick uses fails the one statement that meets it, and the pool
then hands out a working connection again."""
from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import exc, text

from engine.store import driver as db_module
from engine.store.db import db
from tests.harness import POSTGRES_ADMIN_DSN


def _backend_pid() -> int:
    with db.engine.connect() as connection:
        return connection.execute(text("SELECT pg_backend_pid()")).scalar_one()


def _terminate(pid: int) -> None:
    with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.2)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # SQLite has no server to drop connections
def test_an_idle_connection_is_pinged_and_replaced_a_busy_one_is_not(app, backend, monkeypatch):
    with app.app_context():
        db.session.remove()
        db.engine.dispose()
        monkeypatch.setattr(db_module, "IDLE_PING_S", 0.05)
        _terminate(_backend_pid())  # the pool's one connection, dropped while it idles
        time.sleep(0.1)
        assert _backend_pid() > 0   # pinged at checkout, replaced: the statement works

        monkeypatch.setattr(db_module, "IDLE_PING_S", 3600.0)
        _terminate(_backend_pid())  # dropped between two quick uses: not pinged
        with pytest.raises(exc.OperationalError):
            _backend_pid()
        assert _backend_pid() > 0   # the broken connection was thrown away
