"""Migration 0025 on a database of before it (SQLite and PostgreSQL): the secrets stored in the clear
(channel secrets and settings, webhook secrets, a queued delivery's secret) are sealed under the
installed key, and read back as they were."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from flask import Flask
from flask_migrate import Migrate, upgrade
from sqlalchemy import text

from engine.store import sealing
from engine.store.db import db
from tests.conftest import make_database_url
from tests.harness import drop_postgres_database

MIGRATIONS = str(Path(__file__).resolve().parents[4] / "migrations")


@pytest.fixture
def old_database(backend, tmp_path_factory):
    """An app on a new database migrated only up to 0020 (before secrets were sealed)."""
    url = make_database_url(backend, tmp_path_factory)
    app = Flask(__name__)
    app.config.update(SQLALCHEMY_DATABASE_URI=url)
    db.init_app(app)
    Migrate(app, db, directory=MIGRATIONS, render_as_batch=True)
    with app.app_context():
        upgrade(directory=MIGRATIONS, revision="0020")
    before = sealing._ring
    yield app
    sealing._ring = before
    with app.app_context():
        db.engine.dispose()
    if backend == "postgresql":
        drop_postgres_database(url)


def test_0025_seals_every_secret_stored_in_the_clear(old_database):
    app = old_database
    with app.app_context(), db.engine.begin() as connection:
        connection.execute(text("INSERT INTO tenants (id, name, created_at) VALUES (1, 't', CURRENT_TIMESTAMP)"))
        connection.execute(text(
            "INSERT INTO channels (id, tenant_id, type, name, webhook_url, webhook_secret, settings, enabled, created_at) "
            "VALUES (1, 1, 'telegram', 'tg', 'https://x', 'tg-secret-token', :settings, true, CURRENT_TIMESTAMP)"),
            {"settings": json.dumps({"bot_token": "123:bot-token"})})
        connection.execute(text(
            "INSERT INTO webhook_routes (id, tenant_id, code, start_event_id, webhook_id, secret, created_at) "
            "VALUES (1, 1, 'order', 'start', 'wh-1', 'route-secret-123456', CURRENT_TIMESTAMP)"))
        connection.execute(text(
            "INSERT INTO jobs (id, tenant_id, kind, payload, run_at, attempts, created_at) "
            "VALUES (1, 1, 'deliver', :payload, CURRENT_TIMESTAMP, 0, CURRENT_TIMESTAMP)"),
            {"payload": json.dumps({"delivery_id": 9, "secret": "job-secret"})})
    ring = sealing.KeyRing([sealing.decode_key(sealing.new_key())], source="test")
    sealing.install(ring)
    with app.app_context():
        upgrade(directory=MIGRATIONS)
        with db.engine.connect() as connection:
            raw = [value if isinstance(value, str) else json.dumps(value) for value in connection.execute(text(
                "SELECT c.webhook_secret, c.settings, r.secret, j.payload FROM channels c, webhook_routes r, jobs j"
            )).one()]  # (PostgreSQL's driver reads JSON columns as objects)
            keys = list(connection.execute(text("SELECT key_id FROM secret_keys")).scalars())
    for secret in ("tg-secret-token", "123:bot-token", "route-secret-123456", "job-secret"):
        assert secret not in " ".join(raw)
    channel_secret, settings, route_secret, payload = raw
    assert ring.open(channel_secret) == "tg-secret-token" and ring.open(route_secret) == "route-secret-123456"
    assert json.loads(ring.open(json.loads(settings)["sealed"])) == {"bot_token": "123:bot-token"}
    assert ring.open(json.loads(payload)["secret"]) == "job-secret"
    assert keys == [ring.current_id]
