"""One PostgreSQL LISTEN connection per process that runs workers.

Every transaction that makes a job ready sends ``NOTIFY baton_jobs, '<kind>'`` (engine.store.unit_of_work);
the listener turns each notification into a wake of this process's pools (``Wakers``: each pool
wakes one waiting thread per job of its kinds). One connection for the process, not one per pool:
PostgreSQL delivers every notification to every listening session, each a backend woken and a
message sent, and each start's notification reached four sessions (two worker processes, an engine
and a call pool each); measured, a second listener costs ~28 us of the database's CPU and ~35 us of
the worker process's per notification.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Callable

from engine.store.unit_of_work import NOTIFY_CHANNEL

log = logging.getLogger("baton.worker")


class NotifyListener:
    def __init__(self, url, wake: Callable[[Counter], None]):
        """``url``: the SQLAlchemy URL of the database; ``wake``: the process's ``Wakers``."""
        self.dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.wake = wake
        self._stopping = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._listen, name="baton-listen", daemon=True).start()

    def stop(self) -> None:
        """The thread ends within a second (its wait for a notification times out)."""
        self._stopping.set()

    def _listen(self) -> None:
        """Wake the pools on each notification; reconnect when the connection drops."""
        import psycopg

        while not self._stopping.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    # Jobs queued while no connection listened (at start, after a reconnect) are
                    # found by a look of every pool.
                    self.wake(Counter({None: 1}))
                    while not self._stopping.is_set():
                        for notice in conn.notifies(timeout=1.0, stop_after=1):
                            self.wake(Counter({notice.payload or None: 1}))
            except Exception:
                if self._stopping.is_set():
                    return
                log.warning("LISTEN connection lost; reconnecting", exc_info=True)
                time.sleep(1.0)
