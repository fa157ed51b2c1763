"""The database handle and the connection settings that make SQLite safe for several writers.

SQLite: WAL (readers never block the writer), ``synchronous=NORMAL`` (a committed transaction
survives a killed process; only an OS crash may lose the last ones), a long busy timeout, and
every transaction opened with ``BEGIN IMMEDIATE`` so that read-then-write transactions queue for
the write lock instead of failing with "database is locked" halfway through.
"""
from __future__ import annotations

import fcntl
import contextlib
import os
import threading
import weakref
from datetime import datetime, timezone

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import event
from sqlalchemy import exc as exc_module
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase


BUSY_TIMEOUT_S = 30.0
# Per SQLite engine: (acquire, release) of its write lock (``configure_sqlite``), for ``sqlite_write``.
_write_locks: "weakref.WeakKeyDictionary[Engine, tuple]" = weakref.WeakKeyDictionary()


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
        cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    # Threads of this process queue for the write lock here, in order, instead of in SQLite's busy
    # handler, which sleeps in growing steps (measured: p99 accept latency 500-900 ms -> ~150 ms).
    # Processes sharing the file (the server and `flask worker` processes, or worker processes
    # started by the server) queue on an flock of ``<database>-lock`` the same way; the kernel
    # drops a killed process's flock, so a ``kill -9`` never leaves the lock held.
    writer = threading.Lock()
    lock_file = _lock_file_of(engine)
    dbapi_error = engine.dialect.loaded_dbapi.Error

    def _acquire() -> None:
        if not writer.acquire(timeout=BUSY_TIMEOUT_S):
            raise TimeoutError("waited too long for the SQLite write lock")
        if lock_file is not None:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX)
            except BaseException:
                writer.release()
                raise

    def _release_lock() -> None:
        if lock_file is not None:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
        writer.release()

    # BEGIN IMMEDIATE goes straight to the driver: through ``exec_driver_sql`` it cost as much
    # CPU as a real statement (~40 us of SQLAlchemy's execution context), on every transaction.
    # A failure is raised as SQLAlchemy would have raised it.
    @event.listens_for(engine, "begin")
    def _on_begin(connection):
        _acquire()
        try:
            try:
                connection.connection.driver_connection.execute("BEGIN IMMEDIATE")
            except dbapi_error as exc:
                raise exc_module.DBAPIError.instance("BEGIN IMMEDIATE", (), exc, dbapi_error,
                                                     dialect=connection.dialect) from exc
        except BaseException:
            _release_lock()
            raise
        connection.info["baton_writer"] = True

    # The locks are held until the COMMIT or ROLLBACK has run: SQLAlchemy's "commit" and
    # "rollback" events fire *before* it, and releasing there let the next writer's
    # BEGIN IMMEDIATE meet SQLite's still-held lock and sleep in the busy handler.
    dialect = engine.dialect
    do_commit, do_rollback = dialect.do_commit, dialect.do_rollback
    _write_locks[engine] = (_acquire, _release_lock)

    def _after(end):
        def run(dbapi_connection):
            try:
                end(dbapi_connection)
            finally:
                try:
                    info = dbapi_connection.info
                except (AttributeError, NotImplementedError):  # the dialect's first-connect probe
                    info = {}
                if info.pop("baton_writer", False):
                    _release_lock()
        return run

    dialect.do_commit = _after(do_commit)
    dialect.do_rollback = _after(do_rollback)

    @event.listens_for(engine, "close")
    def _on_close(dbapi_connection, record):  # closed inside a transaction: SQLite rolled it back
        if record is not None and record.info.pop("baton_writer", False):
            _release_lock()


def _lock_file_of(engine: Engine):
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    fd = os.open(f"{database}-lock", os.O_RDWR | os.O_CREAT, 0o600)
    weakref.finalize(engine, os.close, fd)  # open for the engine's lifetime
    return fd


# ---------------------------------------------------------------------------------------------
# The driver-level path of the hottest statements on SQLite
#
# SQLAlchemy's execution context costs ~40 us of CPU per statement and its Connection/pool/
# transaction objects ~100 us per transaction; for the plain webhook start (three statements in
# one transaction) that was about half of the server's CPU for the accept. ``DriverStatement``
# compiles a Core statement once and runs it on the DBAPI cursor with SQLAlchemy's own bind and
# result processors and Python-side column defaults, so the rows written are the same.

class DriverStatement:
    """A Core INSERT/UPDATE/DELETE/SELECT, compiled once per dialect, run on a DBAPI connection."""

    def __init__(self, statement):
        self.statement = statement
        self._compiled: dict = {}

    def _prepare(self, dialect):
        prepared = self._compiled.get(dialect)
        if prepared is None:
            compiled = self.statement.compile(dialect=dialect)
            if compiled.positiontup is None:
                raise TypeError("DriverStatement needs a positional paramstyle")
            binds = compiled._bind_processors
            # Python-side defaults (created_at=utcnow, attempts=0 ...), as SQLAlchemy fills them in.
            defaults = []
            for column in (*compiled.insert_prefetch, *compiled.update_prefetch):
                default = column.default if compiled.isinsert else column.onupdate
                if default is None or not (default.is_callable or default.is_scalar):
                    raise TypeError(f"DriverStatement cannot fill the default of {column}")
                if column.key not in compiled.positiontup:
                    raise TypeError(f"DriverStatement cannot fill the default of {column}")
                defaults.append((column.key, default))
            results = [entry[3]._cached_result_processor(dialect, None)
                       for entry in compiled._result_columns] if compiled._result_columns else []
            prepared = (compiled.string, tuple(compiled.positiontup), binds, tuple(defaults),
                        compiled.construct_params(_check=False), results)
            self._compiled[dialect] = prepared
        return prepared

    def execute(self, dbapi_connection, dialect, params: dict) -> list[tuple]:
        """Run it; the rows it returns (SELECT or RETURNING), processed as SQLAlchemy would."""
        return self._run(dbapi_connection, dialect, params)[0]

    def count(self, dbapi_connection, dialect, params: dict) -> int:
        """Run it; how many rows it changed (UPDATE, DELETE)."""
        return self._run(dbapi_connection, dialect, params)[1]

    def _run(self, dbapi_connection, dialect, params: dict) -> tuple[list[tuple], int]:
        sql, names, binds, defaults, fixed, results = self._prepare(dialect)
        values = {**fixed, **params}
        for key, default in defaults:
            if key not in params:
                values[key] = default.arg(None) if default.is_callable else default.arg
        args = []
        for name in names:
            value = values[name]
            process = binds.get(name)
            args.append(process(value) if process is not None else value)
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(sql, args)
            rows = cursor.fetchall() if cursor.description else []
            rowcount = cursor.rowcount
        finally:
            cursor.close()
        if results and rows and any(results):
            rows = [tuple(p(v) if p is not None else v for p, v in zip(results, row)) for row in rows]
        return rows, rowcount


@contextlib.contextmanager
def sqlite_write(engine: Engine):
    """A SQLite write transaction on a pooled DBAPI connection, without SQLAlchemy's Connection:
    the same write lock and ``BEGIN IMMEDIATE`` as every other transaction (``configure_sqlite``);
    commits when the block ends, rolls back if it raises, and releases the lock only after the
    COMMIT or ROLLBACK has run."""
    locks = _write_locks.get(engine)
    if locks is None:
        raise RuntimeError("sqlite_write needs a SQLite engine set up by configure_sqlite")
    acquire, release = locks
    raw = engine.raw_connection()
    try:
        driver = raw.driver_connection
        acquire()
        try:
            driver.execute("BEGIN IMMEDIATE")
            try:
                yield driver
            except BaseException:
                driver.rollback()
                raise
            driver.commit()
        finally:
            try:
                if driver.in_transaction:  # a failed COMMIT or ROLLBACK: never keep the lock
                    driver.rollback()
            finally:
                release()
    finally:
        raw.close()
