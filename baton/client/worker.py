"""``ExternalTaskWorker``: Camunda's external-task client pattern against Baton's ``external.*`` methods.

Handlers subscribe to topics; the worker long-polls ``external.fetch_and_lock`` for as many tasks
as it has free threads, runs each handler in a thread, keeps the locks of running handlers alive
(``external.extend_lock`` when half a lock is used up), and reports the outcome: the handler's
returned variables complete the task, a ``BpmnError`` it raises is ``external.bpmn_error``, any other
exception is ``external.failure`` with the retries left and an exponential back-off (no retries
left: the instance fails there, an incident ``process.retry`` repairs). ``stop()`` (SIGTERM and
Ctrl-C under ``run()``) fetches nothing more and lets the running handlers finish and report.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from baton.client.transport import RpcError

log = logging.getLogger("baton.client.worker")


class BpmnError(Exception):
    """Raised by a handler: the task ends with this BPMN error, which an error boundary event of the
    task with this ``code`` (or none) catches; nothing catches it: the instance fails there."""

    def __init__(self, code: str, message: str | None = None, variables: dict[str, Any] | None = None):
        super().__init__(message or code)
        self.code = code
        self.message = message
        self.variables = variables or {}


@dataclass
class LockedTask:
    """A task the worker fetched and holds the lock on: what its handler receives."""

    task_id: int
    topic: str
    instance_id: int
    definition_id: int
    element_id: str
    variables: dict[str, Any]
    retries: int | None  # what the last failure reported; None before any
    error_message: str | None
    lock_expires_at: str
    lock_duration_ms: int = 0
    # When to extend the lock (half-way through it), on this machine's monotonic clock: the server's
    # lock_expires_at is on its own clock.
    renew_at: float = field(default=0.0, repr=False)
    lost: bool = field(default=False, repr=False)  # the lock could not be kept: a report will be refused

    @classmethod
    def fetched(cls, entry: dict[str, Any], lock_duration_ms: int) -> "LockedTask":
        return cls(task_id=entry["task_id"], topic=entry["topic"], instance_id=entry["instance_id"],
                   definition_id=entry["definition_id"], element_id=entry["element_id"],
                   variables=entry.get("variables") or {}, retries=entry.get("retries"),
                   error_message=entry.get("error_message"), lock_expires_at=entry["lock_expires_at"],
                   lock_duration_ms=lock_duration_ms, renew_at=time.monotonic() + lock_duration_ms / 2000)


Handler = Callable[[LockedTask], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Subscription:
    topic: str
    handler: Handler
    lock_duration_ms: int


class ExternalTaskWorker:
    """Fetches, locks and works on external tasks of the topics subscribed (Camunda's external-task
    client): ``worker.subscribe(topic, handler)`` or ``@worker.subscribe(topic)``, then ``run()``.

    ``client``: a ``baton.client.Client`` whose key holds ``external.*``. ``threads``: handlers that
    run at once (and so the most tasks locked at once). ``wait_ms``: a fetch's long poll (``stop()``
    takes at most that plus the running handlers' time). ``retries``: the tries a task gets in all
    when its handler keeps failing; the n-th failure waits ``backoff_ms * 2**(n-1)`` (at most
    ``max_backoff_ms``) before the task may be fetched again.
    """

    def __init__(self, client, worker_id: str, *, threads: int = 1, lock_duration_ms: int = 60_000,
                 wait_ms: int = 10_000, retries: int = 3, backoff_ms: int = 1_000, max_backoff_ms: int = 60_000):
        if threads < 1 or retries < 1:
            raise ValueError("threads and retries must be at least 1.")
        self.client = client
        self.worker_id = worker_id
        self.threads = threads
        self.lock_duration_ms = lock_duration_ms
        self.wait_ms = wait_ms
        self.retries = retries
        self.backoff_ms = backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.subscriptions: dict[str, Subscription] = {}
        self._stopping = threading.Event()
        self._running: dict[int, LockedTask] = {}
        self._lock = threading.Lock()
        self._free = threading.Semaphore(threads)

    def subscribe(self, topic: str, handler: Handler | None = None, *, lock_duration_ms: int | None = None):
        """Let ``handler`` work on ``topic``'s tasks: it returns the variables that complete the task
        (or None), raises ``BpmnError``, or raises anything else (a failure, retried). Usable as a
        decorator: ``@worker.subscribe("invoiceCreator")``."""
        def add(function: Handler) -> Handler:
            self.subscriptions[topic] = Subscription(topic, function, lock_duration_ms or self.lock_duration_ms)
            return function
        return add if handler is None else add(handler)

    def stop(self) -> None:
        """Fetch nothing more; ``run()`` returns once the running handlers have reported."""
        self._stopping.set()

    def run(self, *, handle_signals: bool = True) -> None:
        """Work until ``stop()`` (and, with ``handle_signals`` in the main thread, SIGTERM or SIGINT)."""
        if not self.subscriptions:
            raise ValueError("Subscribe a handler to at least one topic before run().")
        restore = self._trap_signals() if handle_signals else {}
        keeper = threading.Thread(target=self._keep_locks, name=f"{self.worker_id}-locks", daemon=True)
        keeper.start()
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix=self.worker_id)
        try:
            while not self._stopping.is_set():
                self._fetch_into(pool)
        finally:
            pool.shutdown(wait=True)  # the running handlers finish and report
            self._stopping.set()
            keeper.join()
            for signum, handler in restore.items():
                signal.signal(signum, handler)

    def _trap_signals(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        restore = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            restore[signum] = signal.signal(signum, lambda *_: self.stop())
        return restore

    def _fetch_into(self, pool: ThreadPoolExecutor) -> None:
        self._free.acquire()  # at least one thread is free: fetch for every free one
        free = 1
        while free < self.threads and self._free.acquire(blocking=False):
            free += 1
        try:
            topics = [{"name": s.topic, "lock_duration_ms": s.lock_duration_ms} for s in self.subscriptions.values()]
            fetched = self.client.external.fetch_and_lock(self.worker_id, topics, max_tasks=free,
                                                          wait_ms=self.wait_ms)["tasks"]
        except RpcError as exc:
            log.warning("Fetching external tasks failed: %s; trying again in a second.", exc)
            fetched = []
            self._stopping.wait(1.0)
        for entry in fetched:
            task = LockedTask.fetched(entry, self.subscriptions[entry["topic"]].lock_duration_ms)
            with self._lock:
                self._running[task.task_id] = task
            pool.submit(self._work, task)
        for _ in range(free - len(fetched)):
            self._free.release()

    def _work(self, task: LockedTask) -> None:
        try:
            self._report(task, self.subscriptions[task.topic].handler)
        finally:
            with self._lock:
                self._running.pop(task.task_id, None)
            self._free.release()

    def _report(self, task: LockedTask, handler: Handler) -> None:
        external = self.client.external
        try:
            try:
                variables = handler(task)
            except BpmnError as error:
                external.bpmn_error(task.task_id, self.worker_id, error.code, message=error.message,
                                    variables=error.variables or None)
                return
            except Exception as exc:  # a failure: retried after a back-off, until no retries are left
                left = (self.retries if task.retries is None else task.retries) - 1
                failures = self.retries - left
                log.warning("External task %s (%s) failed: %r; %s retries left.", task.task_id, task.topic, exc, left)
                external.failure(task.task_id, self.worker_id, f"{type(exc).__name__}: {exc}"[:2000],
                                 max(left, 0), retry_timeout_ms=self._backoff_ms(failures) if left > 0 else None)
                return
            external.complete(task.task_id, self.worker_id, variables=variables or None)
        except RpcError as exc:  # the report was refused (the lock was lost) or did not arrive
            log.error("Reporting external task %s failed: %s", task.task_id, exc)

    def _backoff_ms(self, failures: int) -> int:
        return min(self.backoff_ms * 2 ** max(failures - 1, 0), self.max_backoff_ms)

    def _keep_locks(self) -> None:
        """Extend the lock of every running task half-way through it, until the worker stops and
        its handlers are done."""
        while not (self._stopping.is_set() and not self._running):
            with self._lock:
                running = [task for task in self._running.values() if not task.lost]
            for task in running:
                if time.monotonic() >= task.renew_at:
                    self._extend(task)
            time.sleep(min(0.5, self.lock_duration_ms / 4000))

    def _extend(self, task: LockedTask) -> None:
        asked = time.monotonic()
        try:
            answer = self.client.external.extend_lock(task.task_id, self.worker_id, task.lock_duration_ms)
        except RpcError as exc:
            if exc.reason in ("conflict", "not_found"):
                task.lost = True  # reported meanwhile, or the lock expired: its report says which
                log.info("The lock of external task %s was not extended: %s", task.task_id, exc)
            else:  # tried again on the next round
                log.warning("Extending the lock of external task %s failed: %s", task.task_id, exc)
            return
        task.lock_expires_at = answer["lock_expires_at"]
        task.renew_at = asked + task.lock_duration_ms / 2000
