"""The database handle and the connection settings that make SQLite safe for several writers.

SQLite: WAL (readers never block the writer), ``synchronous=NORMAL`` (a committed transaction
survives a killed process; only an OS crash may lose the last ones), a long busy timeout, and
every transaction opened with ``BEGIN IMMEDIATE`` so that read-then-write transactions queue for
the write lock instead of failing with "database is locked" halfway through.
"""
from __future__ import annotations

from datetime import datetime, timezone

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)


def utcnow() -> datetime:
    """Naive UTC now: both databases store timestamps without a zone; UTC is the convention."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def iso(value: datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds: ``2026-11-22T10:15:00.123Z``."""
    if value is None:
        return None
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def is_postgres() -> bool:
    return db.engine.dialect.name == "postgresql"


def configure_sqlite(engine: Engine) -> None:
    """Install the pragmas and the BEGIN IMMEDIATE rule on a SQLite engine."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        # Hand transaction control to SQLAlchemy's "begin" event below (pysqlite's own is wrong).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")
