"""What ``engine.store.driver`` relies on beneath SQLAlchemy's public API, checked against the
SQLAlchemy (and drivers) installed: an upgrade that changes any of it fails here, naming what."""
from __future__ import annotations

import threading

import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, bindparam, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from engine.store.db import db, utcnow
from engine.store.driver import DriverTransaction, Statement, _compile
from engine.store.models import Tenant

_meta = MetaData()
_things = Table("things", _meta, Column("id", Integer, primary_key=True), Column("name", String(20)),
                Column("created_at", DateTime, default=utcnow), Column("size", Integer, default=3))


@pytest.mark.parametrize("dialect", [sqlite.dialect(), postgresql.psycopg.dialect()], ids=["sqlite", "postgresql"])
def test_a_compiled_statement_still_offers_what_statement_run_reads(dialect):
    statement = insert(_things).values(name=bindparam("name")).returning(_things.c.id, _things.c.created_at)
    compiled = statement.compile(dialect=dialect)
    for attribute in ("positiontup", "bind_names", "binds", "insert_prefetch", "update_prefetch", "isinsert", "string"):
        assert hasattr(compiled, attribute), f"SQLAlchemy's compiled statements lost '{attribute}'"
    bind = next(iter(compiled.binds.values()))
    assert hasattr(bind, "effective_value") and hasattr(bind, "required")
    assert callable(bind.type.dialect_impl(dialect).bind_processor)

    sql, names, _binds, defaults, _fixed, results = _compile(statement, dialect)
    # The Python-side defaults are filled in by Statement.run, by column key, as SQLAlchemy would.
    assert {key for key, _default in defaults} == {"created_at", "size"}
    assert "name" in (names if isinstance(names, (dict, tuple)) else ())
    assert len(results) == 2 and "things" in sql


def test_statement_run_writes_the_rows_sqlalchemy_writes(app):
    with app.app_context():
        connection = db.engine.raw_connection()
        try:
            rows, count = Statement(select(Tenant.id).limit(1), writes=False).run(
                connection.driver_connection, db.engine.dialect, {})
        finally:
            connection.close()
        assert count in (-1, 0, 1) and isinstance(rows, list)


def test_the_dialect_still_ends_transactions_through_do_commit_and_do_rollback(app):
    """configure_sqlite wraps them to release the write lock once COMMIT/ROLLBACK has run."""
    with app.app_context():
        dialect = db.engine.dialect
        assert callable(dialect.do_commit) and callable(dialect.do_rollback)
        assert hasattr(db.engine.raw_connection().driver_connection, "commit")


def test_an_orm_commit_gives_the_write_lock_back_to_a_driver_transaction(app, backend):
    """The wrapped do_commit runs after SQLite's COMMIT: a driver transaction begun right after an
    ORM commit, on another thread, gets the write lock at once."""
    with app.app_context():
        db.session.execute(select(Tenant.id).limit(1))
        db.session.commit()
        got: list[float] = []

        def begin() -> None:
            with app.app_context():
                transaction = DriverTransaction(db.engine)
                got.append(1.0)
                transaction.rollback()

        thread = threading.Thread(target=begin)
        thread.start()
        thread.join(5)
        assert got == [1.0], "the write lock was still held after the ORM's commit"
        db.session.remove()


def test_the_driver_connections_still_offer_what_a_driver_transaction_uses(app, backend):
    with app.app_context():
        transaction = DriverTransaction(db.engine, single_write=True)
        try:
            connection = transaction.connection
            if backend == "postgresql":
                assert connection.autocommit is True and hasattr(connection, "closed")
            else:
                assert hasattr(connection, "in_transaction") and connection.in_transaction
        finally:
            transaction.rollback()


def test_sqlite_driver_transactions_of_a_process_share_one_writing_connection(tmp_path):
    """The webhook start, the claim and a save run on one connection of the process, taken out of
    the pool, each under the write lock: its pages stay cached across them. A transaction that
    fails to end drops it (the next one opens another) and never keeps the lock."""
    from app import create_app

    app = create_app({"database_url": f"sqlite:///{tmp_path / 'writing.db'}", "workers": 0})
    table = Tenant.__table__
    add = Statement(insert(table).values(name=bindparam("name")))
    with app.app_context():
        first = DriverTransaction(db.engine)
        connection = first.connection
        first.run(add, {"name": "writing-a"})
        first.commit()
        second = DriverTransaction(db.engine)
        assert second.connection is connection and connection.in_transaction
        second.run(add, {"name": "writing-b"})

        def failing_commit():
            raise RuntimeError("the disk is gone")

        with pytest.raises(RuntimeError):
            second._end(failing_commit)
        third = DriverTransaction(db.engine)  # the lock was released; a new connection
        assert third.connection is not connection
        names = third.run(Statement(select(table.c.name).where(table.c.name.like("writing-%"))), {})[0]
        third.rollback()
        assert names == [("writing-a",)]  # b was never committed
        pooled = db.engine.pool.checkedout()
        DriverTransaction(db.engine).rollback()
        assert db.engine.pool.checkedout() == pooled  # never a pool connection
