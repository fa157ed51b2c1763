"""Who to wake when jobs become ready in this process: the worker pools and worker processes, and
the long polls of external task workers (``LongPoll``).

``create_app`` makes one ``Wakers`` per app; pools add themselves when they start. It is called
after each commit that made jobs ready (``engine.store``), with how many of each kind.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from typing import Callable, Iterator

log = logging.getLogger("baton.wakers")

Waker = Callable[[Counter], None]


class Wakers:
    def __init__(self) -> None:
        self._wakers: tuple[Waker, ...] = ()
        self._takers: tuple = ()   # worker pools that take jobs handed over at commit (engine.jobs.queue)
        self._lock = threading.Lock()

    def add_taker(self, pool) -> None:
        with self._lock:
            self._takers = (*self._takers, pool)

    def remove_taker(self, pool) -> None:
        with self._lock:
            self._takers = tuple(p for p in self._takers if p is not pool)

    def taker(self, kind: str):
        """A pool of this process that runs ``kind`` and takes jobs now, if any."""
        for pool in self._takers:
            if pool.accepts(kind):
                return pool
        return None

    def add(self, waker: Waker) -> None:
        with self._lock:
            self._wakers = (*self._wakers, waker)

    def remove(self, waker: Waker) -> None:
        with self._lock:
            self._wakers = tuple(w for w in self._wakers if w != waker)

    def __call__(self, ready: Counter) -> None:
        """``ready``: how many jobs of each kind were made ready (kind None: unknown)."""
        for waker in self._wakers:
            try:
                waker(ready)
            except Exception:  # the jobs are committed; a worker finds them at its next look
                log.exception("waking workers failed")


# Not a job kind: counted as "made ready" by a commit that opened external tasks, so that long
# polls (``external.fetch_and_lock``) of this process look again at once. Worker pools ignore it.
EXTERNAL_TASKS = "external_tasks"


class LongPoll:
    """Lets a request wait, with no transaction open, until a commit of this process opens
    external tasks (it is one of the ``Wakers``) or a short poll interval passes (commits of other
    processes, expired locks, retry times); at most ``limit`` requests wait at once, so long polls
    never take every HTTP thread."""

    def __init__(self, limit: int, poll_s: float = 1.0) -> None:
        self.poll_s = poll_s
        self._cond = threading.Condition()
        self._generation = 0
        self._slots = threading.BoundedSemaphore(max(1, limit))

    def __call__(self, ready: Counter) -> None:
        if EXTERNAL_TASKS in ready:
            with self._cond:
                self._generation += 1
                self._cond.notify_all()

    def generation(self) -> int:
        with self._cond:
            return self._generation

    def wait(self, seen: int, seconds: float) -> None:
        """Until the generation moves past ``seen`` or ``min(seconds, poll_s)`` pass."""
        with self._cond:
            if self._generation == seen:
                self._cond.wait(max(0.0, min(seconds, self.poll_s)))

    @contextlib.contextmanager
    def slot(self) -> Iterator[bool]:
        """True while this request may wait; False when ``limit`` others already do."""
        acquired = self._slots.acquire(blocking=False)
        try:
            yield acquired
        finally:
            if acquired:
                self._slots.release()
