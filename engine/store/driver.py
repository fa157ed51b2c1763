"""What Baton does beneath SQLAlchemy's public API, in one place, and why each exists.

Everything else in Baton talks to the database through the unit of work
(``engine.store.unit_of_work``) and SQLAlchemy's public API. Four things reach lower, each for a
reason measured on the hot path or needed for correctness; ``tests/unit/engine/store/test_driver.py``
checks that SQLAlchemy still offers what they rely on, so an upgrade fails there, loudly, and not
somewhere deep:

1. **SQLite's write lock** (``configure_sqlite``). Every transaction opens with ``BEGIN IMMEDIATE``
   (pysqlite's own transaction handling is turned off), so a transaction that reads and then writes
   queues for the write lock up front instead of failing "database is locked" halfway. Threads of
   one process, and processes sharing the file, queue on a lock of ours rather than in SQLite's busy
   handler, which sleeps in growing steps. The lock must be released only after COMMIT or ROLLBACK
   has run, and SQLAlchemy's ``commit``/``rollback`` events fire *before* them: so the dialect's
   ``do_commit``/``do_rollback`` are wrapped (the one patch of a SQLAlchemy object).
2. **Idle pings on PostgreSQL** (``configure_postgres``): pool events, public API; here because it
   is the other half of how connections are set up.
3. **Statements run on the DBAPI cursor** (``Statement``). SQLAlchemy's execution context costs
   about as much CPU per statement as the database spends running the hottest ones; a Core
   statement is compiled once per dialect (the compiled SQL, its bind names, its types' bind and
   result processors, its Python-side defaults) and then run on the driver's cursor, writing the
   same rows SQLAlchemy would (tests/unit/engine/store/test_writes.py compares them).
4. **A transaction on the DBAPI connection** (``DriverTransaction``), without SQLAlchemy's
   Connection and transaction objects, for the webhook start, the claim and an advance's plain
   save; on PostgreSQL a transaction of one write runs in autocommit: one round trip, no BEGIN or
   COMMIT. On SQLite they all run on one connection of the process (``_WritingConnection``), taken
   out of the pool and used only under the write lock: SQLite drops a connection's page cache
   whenever another connection has written, so with a pooled connection per thread nearly every
   transaction read its pages again (~20 ``pread`` calls per instance); the server's CPU per webhook
   start fell from 0.57-0.61 to 0.46-0.49 ms (``bench/http_accept.py``, alternated twice).

The figures behind each choice are in docs/internals.md ("The write path").
"""
from __future__ import annotations

import fcntl
import os
import threading
import time
import weakref

from sqlalchemy import event
from sqlalchemy import exc as exc_module
from sqlalchemy.engine import Engine

BUSY_TIMEOUT_S = 30.0
# A pooled PostgreSQL connection idle for longer than this is pinged before it is handed out.
IDLE_PING_S = 10.0

# Per SQLite engine: (acquire, release) of its write lock (``configure_sqlite``), for DriverTransaction.
_write_locks: "weakref.WeakKeyDictionary[Engine, tuple]" = weakref.WeakKeyDictionary()


# -- 1: SQLite's write lock --------------------------------------------------------------------

def configure_sqlite(engine: Engine) -> None:
    """WAL (readers never block the writer), ``synchronous=NORMAL`` (a committed transaction survives
    a killed process; only an OS crash may lose the last ones), a long busy timeout, foreign keys,
    and every transaction opened with ``BEGIN IMMEDIATE`` under Baton's write lock."""
    if not (engine.dialect.update_returning and engine.dialect.delete_returning):
        raise RuntimeError("Baton needs SQLite 3.35 or newer (UPDATE/DELETE ... RETURNING).")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        # Hand transaction control to the "begin" event below (pysqlite's own is wrong).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    # Threads of this process queue here, in order; processes sharing the file (the server and its
    # worker processes) queue on an flock of ``<database>-lock``, which the kernel drops when a
    # process dies, so a ``kill -9`` never leaves the lock held.
    writer = threading.Lock()
    lock_file = _lock_file_of(engine)
    dbapi_error = engine.dialect.loaded_dbapi.Error
    writing = _WritingConnection(engine)

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

    # BEGIN IMMEDIATE goes straight to the driver (through ``exec_driver_sql`` it costs as much as
    # a real statement); a failure is raised as SQLAlchemy would have raised it.
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

    # Released only once COMMIT or ROLLBACK has run: SQLAlchemy's "commit" and "rollback" events
    # fire before them, and releasing there let the next writer meet SQLite's still-held lock.
    dialect = engine.dialect
    do_commit, do_rollback = dialect.do_commit, dialect.do_rollback
    _write_locks[engine] = (_acquire, _release_lock, writing)

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


class _WritingConnection:
    """This process's one connection for ``DriverTransaction``s on SQLite (the webhook start, the
    claim, an advance's save), used only by the thread that holds the write lock. Its page cache
    stays warm across the process's own writes (a connection's cache is dropped whenever another
    connection has written since its last transaction), and no pool checkout is paid per
    transaction. Taken out of the pool on first use, with the pool's connect set-up (WAL, pragmas);
    dropped and opened again after a transaction that failed to end."""

    def __init__(self, engine: Engine):
        self._engine = weakref.ref(engine)
        self._connection = None
        self._close = None  # closes the connection: when dropped, or with this object

    def get(self):
        if self._connection is None:
            fairy = self._engine().raw_connection()
            connection = fairy.driver_connection
            fairy.detach()  # this process's own, never handed to another caller by the pool
            self._connection, self._close = connection, weakref.finalize(self, connection.close)
        return self._connection

    @property
    def is_open(self) -> bool:
        return self._connection is not None

    def drop(self) -> None:
        close, self._connection, self._close = self._close, None, None
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - a broken connection: nothing more to do with it
                pass


def _lock_file_of(engine: Engine):
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    fd = os.open(f"{database}-lock", os.O_RDWR | os.O_CREAT, 0o600)
    weakref.finalize(engine, os.close, fd)  # open for the engine's lifetime
    return fd


# -- 2: idle pings on PostgreSQL ---------------------------------------------------------------

def configure_postgres(engine: Engine) -> None:
    """Ping a pooled connection before use only when it sat idle for ``IDLE_PING_S``.

    ``pool_pre_ping`` pings on every checkout: one round trip per request, claim and save, more
    than a whole single-statement write. A connection in steady use was working a moment ago; one
    that idled (where a restarted database or a firewall drops connections) is pinged, and replaced
    when the ping fails (``DisconnectionError``: the pool takes another). A connection that breaks
    between two uses fails the one statement that meets it: the job is retried, the request
    answers an error.
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


# -- 3: statements on the DBAPI cursor ---------------------------------------------------------

class Statement:
    """A Core INSERT/UPDATE/DELETE/SELECT (``core``), compiled once per dialect for ``run`` on a
    DBAPI connection; a unit of work on the ORM session executes ``core`` itself.

    ``writes``: whether it changes rows (an INSERT/UPDATE/DELETE, or a SELECT whose CTEs do): a
    transaction in autocommit may run only one such statement.
    """

    def __init__(self, statement, *, writes: bool | None = None):
        self.core = statement
        self.writes = bool(getattr(statement, "is_dml", False)) if writes is None else writes
        self._compiled: dict = {}

    def _prepare(self, dialect):
        prepared = self._compiled.get(dialect)
        if prepared is None:
            prepared = self._compiled[dialect] = _compile(self.core, dialect)
        return prepared

    def run(self, dbapi_connection, dialect, params: dict) -> tuple[list[tuple], int]:
        """Run it on a DBAPI connection: the rows it returns (SELECT or RETURNING), processed as
        SQLAlchemy would, and how many rows it changed."""
        sql, names, binds, defaults, fixed, results = self._prepare(dialect)
        values = {**fixed, **params}
        for key, default in defaults:
            if key not in params:
                values[key] = default.arg(None) if default.is_callable else default.arg
        if isinstance(names, dict):
            args = {}
            for name, placeholder in names.items():
                value, process = values[name], binds.get(name)
                args[placeholder] = process(value) if process is not None else value
        else:
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


def _compile(core, dialect) -> tuple:
    """What ``Statement.run`` needs of a compiled statement: its SQL, bind names (positional for
    SQLite's qmark, named for psycopg's pyformat), bind processors, fixed values, Python-side
    defaults (created_at=utcnow, attempts=0 ...) and result processors."""
    compiled = core.compile(dialect=dialect)
    names = compiled.positiontup
    if names is None:
        names = {name: name for name in compiled.bind_names.values()}
        if any(f"%({name})s" not in compiled.string for name in names):
            raise TypeError("Statement needs plain bind names with a named paramstyle")
    binds = {name: bind.type.dialect_impl(dialect).bind_processor(dialect) for name, bind in compiled.binds.items()}
    fixed = {name: bind.effective_value for name, bind in compiled.binds.items() if not bind.required}
    defaults = []
    for column in (*compiled.insert_prefetch, *compiled.update_prefetch):
        default = column.default if compiled.isinsert else column.onupdate
        if default is None or not (default.is_callable or default.is_scalar) or column.key not in names:
            raise TypeError(f"Statement.run cannot fill the default of {column}")
        defaults.append((column.key, default))
    results = [column.type.dialect_impl(dialect).result_processor(dialect, None) for column in core.exported_columns]
    return (compiled.string, names if isinstance(names, dict) else tuple(names), binds, tuple(defaults), fixed,
            results)


# -- 4: a transaction on the DBAPI connection --------------------------------------------------

class DriverTransaction:
    """A transaction on a pooled DBAPI connection: SQLite's under the same write lock and
    ``BEGIN IMMEDIATE`` as every other transaction; psycopg's in a transaction or, with
    ``single_write``, in autocommit (then only one statement that writes may run: a second would
    not be atomic with the first). ``commit`` or ``rollback`` ends it and gives the connection back."""

    def __init__(self, engine: Engine, *, single_write: bool = False):
        self.dialect = engine.dialect
        self.postgres = self.dialect.name == "postgresql"
        self.single_write = single_write and self.postgres
        self.wrote = False
        self._release = None
        self._raw = self._writing = None
        if self.postgres:
            raw = engine.raw_connection()
            self._raw = raw
            try:
                self.connection = raw.driver_connection
                self.connection.autocommit = self.single_write
            except BaseException:
                raw.close()
                raise
            return
        locks = _write_locks.get(engine)
        if locks is None:
            raise RuntimeError("a SQLite DriverTransaction needs an engine set up by configure_sqlite")
        acquire, release, self._writing = locks
        acquire()
        try:
            self.connection = self._writing.get()
            self.connection.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._writing.drop()
            release()
            raise
        self._release = release

    def run(self, statement: Statement, params: dict) -> tuple[list[tuple], int]:
        if statement.writes:
            if self.wrote and self.single_write:
                raise RuntimeError("a single-write transaction ran a second write")
            self.wrote = True
        return statement.run(self.connection, self.dialect, params)

    def execute(self, sql: str) -> None:
        """A statement of the transaction's own (SAVEPOINT, RELEASE ...), on the driver."""
        self.connection.execute(sql)

    def commit(self) -> None:
        self._end(self.connection.commit)

    def rollback(self) -> None:
        self._end(self.connection.rollback)

    def _end(self, end) -> None:
        connection, raw = self.connection, self._raw
        if not self.postgres:  # the writing connection: ended under the lock, kept open
            try:
                end()
            except BaseException:
                self._writing.drop()
                raise
            finally:
                try:
                    if self._writing.is_open and connection.in_transaction:
                        connection.rollback()  # a failed COMMIT or ROLLBACK: never keep the lock
                finally:
                    self._release()
            return
        try:
            end()
        except BaseException:
            if connection.closed:  # the connection broke: never hand it out again
                raw.invalidate()
            raise
        finally:
            try:
                if not connection.closed:
                    connection.autocommit = False
            except Exception:  # noqa: BLE001 - a connection in a state we cannot reset: drop it
                raw.invalidate()
            raw.close()
