"""The database handle and the connection settings that make SQLite safe for several writers.

SQLite: WAL (readers never block the writer), ``synchronous=NORMAL`` (a committed transaction
survives a killed process; only an OS crash may lose the last ones), a long busy timeout, and
every transaction opened with ``BEGIN IMMEDIATE`` so that read-then-write transactions queue for
the write lock instead of failing with "database is locked" halfway through.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import weakref
from datetime import datetime, timezone

from flask import current_app
from flask_sqlalchemy import SQLAlchemy
from flask_sqlalchemy.session import Session as FlaskSession
from sqlalchemy import BigInteger, Integer, event
from sqlalchemy import exc as exc_module
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase

# SQLite only makes INTEGER PRIMARY KEY an auto-increment alias; PostgreSQL gets a BIGINT identity.
BigId = BigInteger().with_variant(Integer(), "sqlite")

BUSY_TIMEOUT_S = 30.0
# Per SQLite engine: (acquire, release) of its write lock (``configure_sqlite``), for ``sqlite_write``.
_write_locks: "weakref.WeakKeyDictionary[Engine, tuple]" = weakref.WeakKeyDictionary()


WAKERS = "baton.wakers"  # app.extensions key: the process's job wakers (engine.jobs.wakers.Wakers)
READY = "baton_ready"    # session.info key: kinds of the jobs this transaction made ready
HANDED = "baton_handed"  # session.info key: (pool, job) of the jobs this transaction leased to a local pool


class Base(DeclarativeBase):
    pass


class BatonSession(FlaskSession):
    """The ORM session: after a commit that made jobs ready, it wakes this process's workers.

    ``engine.store.writes.SessionExecutor.ready`` counts the jobs a transaction makes ready; the
    wakers are the app's (``create_app`` puts them in ``app.extensions``), read when the session is
    made, inside the app context that flask-sqlalchemy scopes sessions to.
    """

    def __init__(self, db, **kwargs):
        super().__init__(db, **kwargs)
        self.wakers = current_app.extensions.get(WAKERS)

    def commit(self) -> None:
        super().commit()
        handed = self.info.pop(HANDED, None)
        ready = self.info.pop(READY, None)
        for pool, job in handed or ():
            pool.take(job)
        if ready and self.wakers is not None:
            self.wakers(ready)

    def rollback(self) -> None:
        self._forget_jobs()
        super().rollback()

    def close(self) -> None:
        self._forget_jobs()
        super().close()

    def _forget_jobs(self) -> None:
        """The transaction's jobs will never commit: nobody is woken, nothing is handed over."""
        self.info.pop(READY, None)
        self.info.pop(HANDED, None)


db = SQLAlchemy(model_class=Base, session_options={"class_": BatonSession})


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


def configure_sqlite(engine: Engine) -> None:
    """Install the pragmas and the BEGIN IMMEDIATE rule on a SQLite engine."""
    if not (engine.dialect.update_returning and engine.dialect.delete_returning):
        raise RuntimeError("Baton needs SQLite 3.35 or newer (UPDATE/DELETE ... RETURNING).")

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


# A pooled PostgreSQL connection idle for longer than this is pinged before it is handed out.
IDLE_PING_S = 10.0


def configure_postgres(engine: Engine) -> None:
    """Ping a pooled connection before use only when it sat idle for ``IDLE_PING_S``.

    SQLAlchemy's ``pool_pre_ping`` pings on every checkout: one round trip per request, per claim
    and per save, more than a whole single-statement write. A connection in steady use was
    working a moment ago; one that idled (where a restarted database server or a firewall drops
    connections) is pinged, and replaced when the ping fails (``DisconnectionError``: the pool
    takes another). A connection that breaks between two uses fails the one statement that
    meets it: the job is retried, the request answers an error.
    """
    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection, record):
        if record is not None:
            record.info["baton_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection, record, _proxy):
        idle_since = record.info.get("baton_idle_since")
        if idle_since is None or time.monotonic() - idle_since < IDLE_PING_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # noqa: BLE001 - any failure: the pool replaces the connection
            raise exc_module.DisconnectionError("an idle pooled connection failed its ping") from exc


def _lock_file_of(engine: Engine):
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    fd = os.open(f"{database}-lock", os.O_RDWR | os.O_CREAT, 0o600)
    weakref.finalize(engine, os.close, fd)  # open for the engine's lifetime
    return fd


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
