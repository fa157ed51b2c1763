"""The database handle (flask-sqlalchemy), the declarative base, and the conventions every table
follows: naive UTC timestamps, ISO 8601 in answers, integer ids that are BIGINT on PostgreSQL.

Transactions are units of work (``engine.store.unit_of_work``); how connections are set up, and
what runs beneath SQLAlchemy's public API, is ``engine.store.driver``.
"""
from __future__ import annotations

from datetime import datetime, timezone

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import BigInteger, Integer
from sqlalchemy import exc as exc_module
from sqlalchemy.orm import DeclarativeBase

# SQLite only makes INTEGER PRIMARY KEY an auto-increment alias; PostgreSQL gets a BIGINT identity.
BigId = BigInteger().with_variant(Integer(), "sqlite")


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


def is_nul_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL's driver refusing a NUL character in text (SQLite keeps it): a
    caller's NUL that reached a query, answered as a bad request by the doors, never a 500."""
    return isinstance(exc, exc_module.DataError) and "NUL" in str(exc.orig)


def is_postgres() -> bool:
    return db.engine.dialect.name == "postgresql"
