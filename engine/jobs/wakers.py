"""Who to wake when jobs become ready in this process: the worker pools and worker processes.

``create_app`` makes one ``Wakers`` per app; pools add themselves when they start. It is called
after each commit that made jobs ready (``engine.store``), with how many of each kind.
"""
from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Callable

log = logging.getLogger("baton.wakers")

Waker = Callable[[Counter], None]


class Wakers:
    def __init__(self) -> None:
        self._wakers: tuple[Waker, ...] = ()
        self._lock = threading.Lock()

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
