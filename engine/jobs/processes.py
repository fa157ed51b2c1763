"""Worker processes supervised by the server: the default of ``serve`` and ``run`` on a machine
with two cores or more (``default_count``), or ``BATON_WORKER_PROCESSES=N``.

Workers run as threads of the server process share one GIL with the HTTP threads: that caps the
whole server at one core. With ``N > 0`` the server runs no engine threads; it starts N ``flask
--app app worker --wake-from-stdin`` children instead (each with ``BATON_WORKERS`` engine threads, unset 1: ``Settings.child_threads``),
restarts a child that dies (``kill -9`` included: its leased jobs are claimed again when the
lease runs out, as with any worker), and stops them when it stops.

Each child's stdin is a pipe from the server: a byte on it wakes the child's workers at once when
the server committed new jobs (there is no NOTIFY on SQLite), and its end of file (the server
exited, however it died) makes the child stop gracefully, as on SIGTERM: its jobs in hand may
finish within the grace period, the rest is released for another worker, and it exits. Writes never block:
a child that does not read only misses a wake-up, and finds the job at its next look.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from engine.jobs.kinds import CALL_KINDS

log = logging.getLogger("baton.worker_processes")

RESTART_DELAY_S = 1.0  # at least this long between two starts of one child (a crash loop stays cheap)
STOP_MARGIN_S = 5.0    # a stopping child's grace, plus this, before it is killed


def default_count(cores: int) -> int:
    """Worker processes of a one-server start (``serve``, ``run``) when ``BATON_WORKER_PROCESSES``
    is unset: one per core from two cores on, none (threads in the server) on one core.

    The engine (SpiffWorkflow, the serializer) is CPU work that threads of one process run one
    at a time; processes use every core. Measured with ``bench/throughput.py`` on two cores that
    are not oversubscribed (docs/operations.md): 2 worker processes ran at 0.46 of raw
    SpiffWorkflow (median of five), threads in the server at 0.28. With one core there is
    nothing to run in parallel, and the processes would only add their memory and wake-ups.
    The database does not change the choice: the GIL is the limit on both.
    """
    return cores if cores >= 2 else 0


class WorkerProcesses:
    def __init__(self, count: int, command: list[str], env: dict[str, str], cwd: Path,
                 check_every_s: float = 0.25):
        self.count = count
        self.command = command
        self.env = env
        self.cwd = cwd
        self.check_every_s = check_every_s
        self.children: list[subprocess.Popen | None] = [None] * count
        self._started_at = [0.0] * count
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.restarts = 0
        self._next = 0

    def start(self) -> None:
        for index in range(self.count):
            self._spawn(index)
        self._thread = threading.Thread(target=self._watch, name="baton-worker-supervisor", daemon=True)
        self._thread.start()

    def pids(self) -> list[int]:
        with self._lock:
            return [child.pid for child in self.children if child is not None]

    def _spawn(self, index: int) -> None:
        child = subprocess.Popen(self.command, cwd=self.cwd, env=self.env, stdin=subprocess.PIPE)
        os.set_blocking(child.stdin.fileno(), False)
        with self._lock:
            self.children[index] = child
            self._started_at[index] = time.monotonic()

    def _watch(self) -> None:
        while not self._stopping.wait(self.check_every_s):
            for index in range(self.count):
                child = self.children[index]
                if child is None or child.poll() is None or self._stopping.is_set():
                    continue
                if time.monotonic() - self._started_at[index] < RESTART_DELAY_S:
                    continue
                log.warning("worker process %s exited with %s; starting a new one", child.pid, child.returncode)
                _close(child)
                try:
                    self._spawn(index)
                    self.restarts += 1
                except OSError:
                    log.exception("could not start a worker process; trying again")

    def wake(self, ready: Counter | None = None) -> None:
        """Tell one child that jobs were committed (a jobs waker: called after such a commit).

        One child per commit, in turn: a child that is busy claims again as soon as it is done,
        so waking every child (and each of its threads) for one job only made the others run
        empty claims, each a write transaction on SQLite. ``c``: some job may be for the call
        threads (or of unknown kind), and the child wakes every pool; ``e``: engine jobs only.
        """
        signal = b"c" if ready is None or any(kind is None or kind in CALL_KINDS for kind in ready) else b"e"
        with self._lock:
            children = list(self.children)
            self._next = (self._next + 1) % max(1, len(children))
            first = self._next
        for offset in range(len(children)):
            child = children[(first + offset) % len(children)]
            if child is None or child.stdin is None or child.poll() is not None:
                continue
            try:
                os.write(child.stdin.fileno(), signal)
                return
            except (BlockingIOError, BrokenPipeError, OSError, ValueError):
                continue  # full pipe (it is behind: it will look anyway) or a dead child (being replaced)

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop every child gracefully: end of file on its stdin, and it stops as on SIGTERM (its
        jobs in hand may finish within its own ``BATON_SHUTDOWN_GRACE_S``, the rest is released).
        A child still alive ``STOP_MARGIN_S`` after that grace is killed."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(self.check_every_s + 1.0)
        with self._lock:
            children = [child for child in self.children if child is not None]
        for child in children:
            _close(child)  # end of file: the child finishes what it holds and exits
        deadline = time.monotonic() + grace_s + STOP_MARGIN_S
        for child in children:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)


def _close(child: subprocess.Popen) -> None:
    try:
        if child.stdin is not None:
            child.stdin.close()
    except OSError:
        pass


def follow_parent(wake_one, wake_all, stop) -> threading.Thread:
    """In a child: wake workers for each byte on stdin (``e``: one engine thread, else every
    thread); stop them at end of file (the server exited)."""

    def run() -> None:
        while True:
            try:
                data = os.read(0, 4096)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                stop()
                return
            if data.strip(b"e"):
                wake_all()
            for _ in range(min(data.count(b"e"), 8)):
                wake_one()

    thread = threading.Thread(target=run, name="baton-follow-parent", daemon=True)
    thread.start()
    return thread


def child_command(threads: int) -> list[str]:
    return [sys.executable, "-m", "flask", "--app", "app", "worker", "--threads", str(threads), "--wake-from-stdin"]
