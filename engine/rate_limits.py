"""Rate limits per API key and per webhook route (``BATON_RATE_LIMIT_PER_KEY``,
``BATON_RATE_LIMIT_PER_WEBHOOK``, requests per second; 0 = off, the default).

A fixed window aligned to the clock: at most ``floor(rate)`` requests in each second (a rate below
1 allows one request per ``ceil(1 / rate)`` seconds); the request over it is refused with
``TooManyRequestsError`` (429, ``Retry-After`` = seconds to the window's end). Where the counts live
follows the database (docs/operations.md, "Rate limits"):

- PostgreSQL (any number of web processes): one row per bucket in the UNLOGGED table
  ``rate_limit_windows``, one ``INSERT … ON CONFLICT DO UPDATE … RETURNING`` per request in
  autocommit (a connection per serving thread), so every process counts against the same limit.
- SQLite: a small table of buckets in a file beside the database (``<database>-limits``, mapped
  into memory, ``FileWindows``) that every process serving that database counts into under a file
  lock: the default ``serve`` has one serving process per core. A write per request to the
  database itself would take its write lock on every read. An in-memory database counts in a
  dictionary of the process (``MemoryWindows``).
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import math
import mmap
import os
import re
import struct
import threading
import time
import weakref
from typing import Callable

from sqlalchemy.engine import Engine

from engine.errors import TooManyRequestsError
from engine.store.models import RateLimitWindow
from engine.telemetry import metrics

log = logging.getLogger("baton.rate_limits")

MAX_BUCKET = 80  # the column's size
_WEBHOOK_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
PURGE_EVERY_S = 60.0


class MemoryWindows:
    """Hits per bucket in the current window, in this process (the SQLite server's)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._window_end = 0
        self._hits: dict[str, int] = {}

    def hit(self, bucket: str, window_end: int) -> int:
        with self._lock:
            if window_end > self._window_end:  # a new window: the old counts (and buckets) go
                self._window_end, self._hits = window_end, {}
            hits = self._hits.get(bucket, 0) + 1
            self._hits[bucket] = hits
            return hits


class FileWindows:
    """Hits per bucket in the current window, shared by the processes that open the same file
    (SQLite's serving processes): ``SLOTS`` slots of (bucket hash, window end, hits) in a mapped
    file, each hit read and written under an exclusive ``flock`` (and a lock for this process's
    threads, which share the descriptor). A bucket's slot is found by open addressing from its
    hash; a slot of a past window is free again. With every slot of a probe run taken by this
    window's buckets (more than ``SLOTS`` callers in one second), the hit counts in this process
    alone (``MemoryWindows``), and a warning says so once."""

    SLOTS = 4096
    PROBES = 32
    _SLOT = struct.Struct("<QqQ")  # bucket hash (0: never used), window end, hits

    def __init__(self, path: str):
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        size = self.SLOTS * self._SLOT.size
        if os.fstat(self._fd).st_size < size:
            os.ftruncate(self._fd, size)  # zeros: every slot unused
        self._map = mmap.mmap(self._fd, size)
        self._lock = threading.Lock()
        self._overflow = MemoryWindows()
        self._warned = False
        weakref.finalize(self, _close_map, self._map, self._fd)

    def hit(self, bucket: str, window_end: int) -> int:
        key = int.from_bytes(hashlib.blake2b(bucket.encode(), digest_size=8).digest(), "little") or 1
        slot_of, size, start = self._SLOT.unpack_from, self._SLOT.size, key % self.SLOTS
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                free = None
                for probe in range(self.PROBES):
                    offset = ((start + probe) % self.SLOTS) * size
                    found, end, hits = slot_of(self._map, offset)
                    if found == key:
                        hits = hits + 1 if end >= window_end else 1
                        self._SLOT.pack_into(self._map, offset, key, max(end, window_end), hits)
                        return hits
                    if free is None and (found == 0 or end < window_end):
                        free = offset
                    if found == 0:
                        break  # never used: the bucket is not further on
                if free is not None:
                    self._SLOT.pack_into(self._map, free, key, window_end, 1)
                    return 1
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        if not self._warned:
            self._warned = True
            log.warning("rate limits: more than %d buckets in one window; the rest count per process", self.SLOTS)
        return self._overflow.hit(bucket, window_end)


def _close_map(mapped: mmap.mmap, fd: int) -> None:
    mapped.close()
    os.close(fd)


def windows_file(engine: Engine) -> str | None:
    """The shared windows' file of a SQLite database in a file, else None."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return None
    return f"{database}-limits"


# One statement per hit. A later window starts again at 1; a process whose clock is behind counts
# into the newer window (GREATEST), so the windows of several machines never flip back and forth.
_HIT = (f"INSERT INTO {RateLimitWindow.__tablename__} AS w (bucket, window_end, hits) VALUES (%s, %s, 1) "
        "ON CONFLICT (bucket) DO UPDATE SET "
        "hits = CASE WHEN w.window_end < EXCLUDED.window_end THEN 1 ELSE w.hits + 1 END, "
        "window_end = GREATEST(w.window_end, EXCLUDED.window_end) RETURNING hits")
_PURGE = f"DELETE FROM {RateLimitWindow.__tablename__} WHERE window_end < %s"


class DatabaseWindows:
    """Hits per bucket in the shared table (PostgreSQL): one statement per hit, in autocommit, on a
    driver connection of the serving thread's own: a hit through the app's pool (SQLAlchemy, a
    transaction each) costs the server 3.5-5 times the CPU (~110 µs against ~30 µs)."""

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time):
        self.dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.clock = clock
        self._purged_at = 0.0
        self._local = threading.local()
        self._opened: list = []  # every thread's connection, closed with this object
        weakref.finalize(self, _close_all, self._opened)

    def close(self) -> None:
        _close_all(self._opened)

    def hit(self, bucket: str, window_end: int) -> int:
        import psycopg

        connection = getattr(self._local, "connection", None)
        if connection is None or connection.closed:
            connection = self._local.connection = psycopg.connect(self.dsn, autocommit=True)
            self._opened.append(connection)
        try:
            hits = connection.execute(_HIT, (bucket, window_end)).fetchone()[0]
            now = self.clock()
            if now - self._purged_at > PURGE_EVERY_S:  # buckets of past windows (unknown webhook ids too)
                self._purged_at = now
                connection.execute(_PURGE, (int(now - PURGE_EVERY_S),))
        except psycopg.Error:
            connection.close()  # a new one next time (the server restarted, the network broke ...)
            raise
        return hits


def _close_all(connections: list) -> None:
    while connections:
        connections.pop().close()


class Limit:
    """One limit (``name``: what the caller is told is limited), counting in ``windows``."""

    def __init__(self, name: str, label: str, rate: float, windows, clock: Callable[[], float] = time.time):
        if not rate > 0 or math.isinf(rate):
            raise ValueError(f"A rate limit is a positive number of requests per second, not {rate!r}.")
        self.name, self.label, self.windows, self.clock = name, label, windows, clock
        self.window_s = 1 if rate >= 1 else math.ceil(1 / rate)
        self.allowed = max(1, math.floor(rate * self.window_s))

    def check(self, bucket: str) -> None:
        """Count a request of ``bucket``; TooManyRequestsError when the window's allowance is used up."""
        now = self.clock()
        window_end = (math.floor(now / self.window_s) + 1) * self.window_s
        try:
            hits = self.windows.hit(bucket[:MAX_BUCKET], window_end)
        except Exception as exc:  # the database is unreachable: the request fails or not on its own
            log.warning("rate limit per %s not counted: %s", self.name, type(exc).__name__)
            return
        if hits > self.allowed:
            metrics.RATE_LIMITED.labels(self.label).inc()
            raise TooManyRequestsError(self.name, math.ceil(window_end - now))


class RateLimits:
    """The configured limits of a process; ``check_key`` / ``check_webhook`` do nothing when off."""

    def __init__(self, *, per_key: float, per_webhook: float, engine: Engine | None = None):
        shared = None  # one store for both limits: a connection per thread, or one mapped file
        if (per_key or per_webhook) and engine is not None:
            path = windows_file(engine)
            if engine.dialect.name == "postgresql":
                shared = DatabaseWindows(engine)
            elif path is not None:
                shared = FileWindows(path)
        self.per_key = Limit("API key", "api_key", per_key, shared or MemoryWindows()) if per_key else None
        self.per_webhook = Limit("webhook", "webhook", per_webhook, shared or MemoryWindows()) if per_webhook else None
        self._shared = shared

    def close(self) -> None:
        if isinstance(self._shared, DatabaseWindows):
            self._shared.close()

    def check_key(self, key_id: int) -> None:
        if self.per_key is not None:
            self.per_key.check(f"k{key_id}")

    def check_webhook(self, webhook_id: str) -> None:
        if self.per_webhook is not None:
            # Ids no route can have (real ones are URL-safe base64) share one allowance: a flood of
            # made-up ids is limited too, and nothing odd (a NUL) reaches the database.
            self.per_webhook.check(f"w{webhook_id}" if _WEBHOOK_ID.fullmatch(webhook_id) else "w?")
