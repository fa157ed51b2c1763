"""Settings read from the environment: the engine threads a process runs by default, the database pool."""
from __future__ import annotations

import pytest

from app import Settings
from engine.jobs.processes import child_command


@pytest.mark.parametrize("environment, threads_here, threads_per_child", [
    ({}, 2, 1),                        # unset: 2 threads in a server without children, 1 per child
    ({"BATON_WORKERS": ""}, 2, 1),
    ({"BATON_WORKERS": "3"}, 3, 3),    # set: the same count everywhere
    ({"BATON_WORKERS": "0"}, 0, 0),    # a web-only process
])
def test_engine_threads_by_topology(environment, threads_here, threads_per_child):
    settings = Settings.from_mapping(environment)
    assert settings.worker_threads == threads_here
    assert settings.child_threads == threads_per_child
    # A supervised child is told its count on its command line; its own environment does not
    # carry BATON_WORKERS when it was unset.
    assert child_command(settings.child_threads)[-3:-1] == ["--threads", str(threads_per_child)]
    assert ("BATON_WORKERS" in settings.as_environment()) == bool(environment.get("BATON_WORKERS"))


def test_database_pool_size(tmp_path):
    from app import create_app
    from engine.store.db import db

    url = f"sqlite:///{tmp_path / 'baton.db'}"
    with pytest.raises(ValueError, match="BATON_DB_POOL_SIZE must be at least 1"):
        create_app({"DATABASE_URL": url, "BATON_DB_POOL_SIZE": "0"})
    for environment, size in (({}, 20), ({"BATON_DB_POOL_SIZE": "7"}, 7)):
        app = create_app({"DATABASE_URL": url, **environment})
        with app.app_context():
            assert db.engine.pool.size() == size  # connections kept between requests, not closed
            # Last in, first out: the connection returned last is the next one handed out.
            first, second = db.engine.pool.connect(), db.engine.pool.connect()
            first_dbapi, second_dbapi = first.dbapi_connection, second.dbapi_connection
            first.close()
            second.close()
            again = db.engine.pool.connect()
            assert again.dbapi_connection is second_dbapi and second_dbapi is not first_dbapi
            again.close()
            db.engine.dispose()
