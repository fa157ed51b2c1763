"""The unit of work: one transaction of Baton's, begun, committed and rolled back only by whoever
handles a request or a job (``rpc/endpoint.py``, the doors in ``channels/``, the worker, the command
line). The use cases it is handed read and write through it and never end it.

One interface, two backings. Most transactions run on the ORM session (``session``, ``execute``).
The hottest ones (a webhook start, a claim, an advance's plain save) run on the DBAPI connection
itself (``on_driver``, ``engine.store.driver``), where SQLAlchemy's machinery costs more than the
statements. Both run the same ``Statement``s (``rows``, ``count``), so each write of
``engine.store.writes`` is written once.

What a transaction causes beyond its rows happens after its commit, never before and never after a
rollback: the workers of this process woken for the jobs it made ready (on PostgreSQL the
transaction also notifies other processes, delivered at commit), jobs leased to a worker pool of
this process handed to it, and ``after_commit`` callbacks (metrics of what was committed). What a
use case did outside the database before its writes (a webhook registered with a messenger) is
undone by its ``on_rollback`` callbacks if the unit of work is rolled back instead.

A use case whose work must not hold a transaction across a call to another server returns a
``Then`` to its owner: the owner commits, runs ``Then.call`` with no unit of work open, and hands
what it returned to ``Then.step`` in a new unit of work (``run_steps``).

``actor`` says on whose behalf the work is done (an API key, a webhook, a channel, the system):
what the unit of work writes about itself (an instance's history) names it.
"""
from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from sqlalchemy import bindparam, event, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from engine.store.db import db
from engine.store.driver import DriverTransaction, Statement
from engine.telemetry import metrics

NOTIFY_CHANNEL = "baton_jobs"
_NOTIFY = Statement(select(func.pg_notify(NOTIFY_CHANNEL, bindparam("kind"))))


@dataclass(frozen=True)
class Actor:
    """Who a unit of work acts for: ``kind`` is ``api_key``, ``webhook``, ``channel`` or ``system``;
    ``name`` the key's name, the webhook id, the channel's name, or ``baton``."""

    kind: str
    name: str

    def as_dict(self) -> dict[str, str]:
        return {"type": self.kind, "name": self.name}


SYSTEM = Actor("system", "baton")


class UnitOfWork:
    """One transaction; see the module's docstring. ``owner`` names who begun it (a label of
    ``baton_transactions_total``)."""

    def __init__(self, engine: Engine, wakers: Callable[[Counter], Any] | None, *, owner: str,
                 actor: Actor = SYSTEM):
        self.engine = engine
        self.wakers = wakers
        self.owner = owner
        self.actor = actor
        self.postgres = engine.dialect.name == "postgresql"
        self._session: Session | None = None
        self._driver: DriverTransaction | None = None
        self._ready: Counter = Counter()
        self._handed: list[tuple[Any, Any]] = []
        self._after: list[Callable[[], Any]] = []
        self._undo: list[Callable[[], Any]] = []
        self._wrote = False

    # -- what use cases use ------------------------------------------------------------------

    @property
    def session(self) -> Session:
        """The ORM session, whose transaction (begun on first use) is this unit's."""
        if self._driver is not None:
            raise RuntimeError("this unit of work runs on the driver connection: it has no ORM session")
        if self._session is None:
            self._session = _watched(db.session())
        return self._session

    def on_driver(self, *, single_write: bool = False) -> "UnitOfWork":
        """Run this unit's transaction on the DBAPI connection (``rows`` and ``count`` only). Must
        come before anything else is read or written; ``single_write``: at most one statement
        that writes, reads before it (on PostgreSQL the transaction is then that one statement,
        in autocommit)."""
        if self._driver is not None or self._session is not None and self._session.in_transaction():
            raise RuntimeError("on_driver must be the first thing a unit of work does")
        self._driver = DriverTransaction(self.engine, single_write=single_write)
        return self

    def execute(self, statement, params: dict[str, Any] | list | None = None):
        """A Core or ORM statement in this unit's transaction (the ORM session's)."""
        if getattr(statement, "is_dml", False):
            self._wrote = True
        return self.session.execute(statement, params)

    def run(self, statement, params: dict[str, Any] | list | None = None):
        """A Core statement on the session's connection, without the ORM's execution layer (the
        hot paths' reads and writes of rows they name by column)."""
        if getattr(statement, "is_dml", False):
            self._wrote = True
        return self.session.connection().execute(statement, params)

    def connection(self):
        """The session's connection, for a run of Core statements (``run`` is the usual way)."""
        return self.session.connection()

    def rows(self, statement: Statement, params: dict[str, Any]) -> list[tuple]:
        """The rows of a ``Statement`` (SELECT or RETURNING) run in this unit's transaction."""
        if self._driver is not None:
            return self._driver.run(statement, params)[0]
        self._wrote = self._wrote or statement.writes
        return self.session.connection().execute(statement.core, params).all()

    def count(self, statement: Statement, params: dict[str, Any]) -> int:
        """How many rows a ``Statement`` changed, run in this unit's transaction."""
        if self._driver is not None:
            return self._driver.run(statement, params)[1]
        self._wrote = self._wrote or statement.writes
        return self.session.connection().execute(statement.core, params).rowcount

    def ready(self, kind: str | None, *, notified: bool = False) -> None:
        """A job of ``kind`` becomes ready with this transaction: the workers that run it are woken
        after the commit. On PostgreSQL other processes are notified at commit too, unless the
        statement that made it ready did that itself (``notified``)."""
        if kind not in self._ready and self.postgres and not notified:
            # The payload is the kind, so a pool of another process wakes only for its own kinds.
            if self._driver is not None:  # (in autocommit the write has committed: this follows it)
                self._driver.run(_NOTIFY, {"kind": kind or ""})
            else:
                self.session.execute(_NOTIFY.core, {"kind": kind or ""})
        self._ready[kind] += 1

    def hand_over(self, pool, job) -> None:
        """Give ``job`` (leased to ``pool`` in this transaction) to ``pool`` after the commit."""
        self._handed.append((pool, job))

    def after_commit(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` once this transaction has committed (never if it is rolled back)."""
        self._after.append(callback)

    def on_rollback(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` if this unit of work is rolled back instead of committed: the undoing of
        something done outside the database for its sake."""
        self._undo.append(callback)

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """The block's writes stay only if it completes, while the transaction goes on. (ORM rows
        added before the block are flushed as it begins, outside it: add those that belong to it
        inside.)"""
        if self._driver is None:
            with self.session.begin_nested():
                yield
            return
        self._driver.execute("SAVEPOINT baton_write")
        try:
            yield
        except BaseException:
            self._driver.execute("ROLLBACK TO SAVEPOINT baton_write")
            raise
        finally:
            self._driver.execute("RELEASE SAVEPOINT baton_write")

    def end_read(self) -> None:
        """End a transaction that only read, before a call to another server, a wait or a long
        computation (on SQLite any open transaction holds the database's write lock). Refused once
        it wrote: writes are committed by the unit's owner, never by the use case."""
        if self.wrote:
            raise RuntimeError("end_read on a unit of work that wrote: only its owner ends it")
        self._end("rollback")

    @property
    def wrote(self) -> bool:
        session = self._session
        return (self._wrote or bool(self._ready) or (self._driver is not None and self._driver.wrote)
                or (session is not None and (session.info.get(_FLUSHED, False)
                                             or bool(session.new or session.dirty or session.deleted))))

    # -- what only the owner calls -----------------------------------------------------------

    def commit(self) -> None:
        """Commit, then wake, hand over and call back what the transaction caused."""
        began = self._driver is not None or (self._session is not None and self._session.in_transaction())
        try:
            self._end("commit")
        except BaseException:
            self.rollback()
            raise
        ready, handed, after = self._ready, self._handed, self._after
        self._forget()
        if began:
            metrics.TRANSACTIONS.labels(self.owner).inc()
        for pool, job in handed:
            pool.take(job)
        if ready and self.wakers is not None:
            self.wakers(ready)
        for callback in after:
            callback()

    def rollback(self) -> None:
        """Undo everything; nobody is woken, nothing is handed over or called back, and what was
        done outside the database for this unit is undone (``on_rollback``)."""
        undo = self._undo
        self._forget()
        try:
            self._end("rollback")
        finally:
            for callback in reversed(undo):
                callback()

    def _end(self, how: str) -> None:
        """End the transaction on whichever backing it runs: ``commit`` or ``rollback``."""
        if self._driver is not None:
            driver, self._driver = self._driver, None
            getattr(driver, how)()
        elif self._session is not None:
            getattr(self._session, how)()

    def _forget(self) -> None:
        self._ready, self._handed, self._after, self._undo, self._wrote = Counter(), [], [], [], False
        if self._session is not None:
            self._session.info.pop(_FLUSHED, None)


_FLUSHED = "baton_flushed"  # session.info: the ORM flushed writes in the current transaction


def _watched(session: Session) -> Session:
    """``session``, marking in its info when a flush writes (so ``end_read`` can refuse)."""
    if not session.info.get("baton_watched"):
        session.info["baton_watched"] = True
        event.listen(session, "after_flush", _note_flush)
        event.listen(session, "after_soft_rollback", _forget_flush)
        event.listen(session, "after_commit", _forget_flush)
    return session


def _note_flush(session, _context) -> None:
    session.info[_FLUSHED] = True


def _forget_flush(session, *_args) -> None:
    session.info.pop(_FLUSHED, None)


class Units:
    """Where owners begin units of work: the database engine (the app's, or one given: the webhook
    door runs outside Flask's app context, on the driver) and the wakers of this process.
    ``create_app`` builds one and hands it to the doors, the workers and the command line."""

    def __init__(self, wakers: Callable[[Counter], Any] | None, *, engine: Engine | None = None):
        self.wakers = wakers
        self.engine = engine  # None: the app's (``db.engine``, in an app context)

    def new(self, owner: str, actor: Actor = SYSTEM) -> UnitOfWork:
        """A unit of work its owner ends itself (``commit`` or ``rollback``)."""
        return UnitOfWork(self.engine or db.engine, self.wakers, owner=owner, actor=actor)

    @contextlib.contextmanager
    def begin(self, owner: str, actor: Actor = SYSTEM, *, on_driver: bool = False,
              single_write: bool = False) -> Iterator[UnitOfWork]:
        """A unit of work for the block: committed when it completes, rolled back if it raises."""
        uow = self.new(owner, actor)
        if on_driver:
            uow.on_driver(single_write=single_write)
        try:
            yield uow
        except BaseException:
            uow.rollback()
            raise
        uow.commit()


@dataclass(frozen=True)
class Then:
    """What follows a committed unit of work: ``call`` (None: nothing to call) with no unit of work
    open, then ``step`` in a new one with what ``call`` returned; ``step`` answers a further
    ``Then``, or the result of the whole."""

    step: Callable[[UnitOfWork, Any], Any]
    call: Callable[[], Any] | None = None


def run_steps(units: "Units", owner: str, actor: Actor, result: Any) -> Any:
    """For an owner whose unit of work has committed with ``result``: follow its ``Then``s, each
    call outside any unit of work, each step in a unit of work of its own; the final result."""
    while isinstance(result, Then):
        value = result.call() if result.call is not None else None
        with units.begin(owner, actor) as uow:
            result = result.step(uow, value)
    return result
