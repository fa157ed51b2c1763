"""The loop that runs jobs: threads inside the server, or a ``flask worker`` process.

Workers sleep until woken: directly after a local commit that enqueued jobs (embedded default, no
polling delay), by PostgreSQL NOTIFY from other processes (``engine.jobs.listener``), or when the
next delayed job is due.
Every transaction here is a unit of work the worker owns (``engine.store.unit_of_work``): the
claim, each job's (a handler writes into it and returns; the worker commits), the steps a handler
asks for after it (``unit_of_work.Then``: a call to another server runs with no unit of work open),
a batch's saves, a release. A job whose handler raises is tried again with a growing delay; after
``max_attempts`` its handler's ``give_up`` ends it (an instance is then failed with a generic
message). A handler's write that finds its job or instance changed under it (``writes.Lost``)
leaves nothing behind, and the job goes back to the queue for a fresh try.
The jobs of one claim (up to ``CLAIM_BATCH``, under load) run in turn as a batch: a handler with
``begin_batch``/``take_batch``/``save_batch`` (the runner) saves them together at its end, in one
unit of work.

A process runs two pools (``app.Baton.start_workers``): engine threads for the kinds that advance
instances (CPU, the script sandbox) and call threads for the kinds that wait on other servers
(HTTP tasks, AI turns, deliveries), so a slow model or receiver never holds up the engine.

Stopping (SIGTERM, docs/operations.md) is graceful: ``stop_claiming``, then ``finish`` waits for
the jobs in hand until the grace period ends and releases what is left, due at once.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter, deque
from datetime import datetime
from typing import Protocol

from engine import jobs
from engine.jobs.retry import MAX_ATTEMPTS, job_backoff
from engine.jobs.wakers import Wakers
from engine.store import writes
from engine.store.db import db, utcnow
from engine.store.unit_of_work import SYSTEM, Units, run_steps
from engine.telemetry import context, metrics

log = logging.getLogger("baton.worker")


class JobHandler(Protocol):
    """Runs the jobs of its kinds, writing into the unit of work it is given; returns the steps
    that follow (``jobs.Then``) or None. A handler may also have ``begin_batch(worker_id)``,
    ``take_batch(worker_id) -> batch | None`` and ``save_batch(batch, uow) -> [lost jobs]``
    (``Runner``): the jobs of one claim are then a batch whose writes wait for its end."""

    def handle(self, job: jobs.ClaimedJob, worker_id: str, uow) -> jobs.Then | None: ...
    def give_up(self, job: jobs.ClaimedJob, worker_id: str, uow) -> None: ...


class WorkerPool:
    # Jobs leased per claim transaction: under load one claim serves several jobs (the claim is
    # a write transaction, serialized with every other writer on SQLite); when idle it gets one.
    # Eight rather than four: 3-4 % less CPU per instance under load (docs/internals.md).
    CLAIM_BATCH = 8
    # A batch's saves that wait for its end (handlers with ``begin_batch``/``end_batch``) are
    # committed before its next job once the batch has run this long: a slow job holds back the
    # saves before it, not the ones after it.
    BATCH_SAVE_S = 0.05

    def __init__(self, app, handlers: dict[str, JobHandler], *, units: Units, wakers: Wakers, threads: int,
                 lease_seconds: float,
                 poll_seconds: float, max_attempts: int = MAX_ATTEMPTS, claim_batch: int = CLAIM_BATCH,
                 kinds: jobs.KindFilter | None = None, name: str = "worker"):
        self.app = app
        self.units = units
        self.wakers = wakers
        self.kinds = kinds
        self.pool_name = name
        self.claim_batch = max(1, claim_batch)
        self.handlers = handlers
        # The handlers that can wait with their saves until the end of a claimed batch.
        self._batching = list({id(h): h for h in handlers.values() if hasattr(h, "begin_batch")}.values())
        self.threads = threads
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.max_attempts = max_attempts
        self._signal = 0
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        # Per thread (worker id): the jobs it holds and has not done yet, each with the worker id
        # that leases it, released at a stop.
        self._held: dict[str, list[tuple[jobs.ClaimedJob, str]]] = {}
        self._name = f"{socket.gethostname()[:40]}:{os.getpid()}"  # worker ids fit jobs.locked_by (64)
        # Jobs handed over at commit by this process's transactions (``take``), leased to
        # ``holder_id``, with when they came; any thread of the pool runs them before claiming.
        self.holder_id = f"{self._name}:{self.pool_name[0]}h"
        self._handed: deque[tuple[jobs.ClaimedJob, float]] = deque()

    def start(self) -> None:
        self.wakers.add(self.wake)
        self.wakers.add_taker(self)
        for index in range(self.threads):
            thread = threading.Thread(target=self._loop, args=(f"{self._name}:{self.pool_name[0]}{index}",),
                                      name=f"baton-{self.pool_name}-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, grace_s: float = 10.0) -> int:
        """Stop claiming, let the jobs in hand finish for ``grace_s``, then release the rest."""
        self.stop_claiming()
        return self.finish(time.monotonic() + grace_s)

    def stop_claiming(self) -> None:
        """No thread claims again; a thread with a job finishes it, then ends (graceful stop, 1)."""
        self.wakers.remove_taker(self)
        self.wakers.remove(self.wake)
        self._stopping.set()
        self.wake()

    def finish(self, deadline: float) -> int:
        """Wait until ``deadline`` (``time.monotonic()``) for the threads to end, then release every
        job a thread still holds: due now, no lease, so that another worker claims it at once
        rather than when the lease runs out (graceful stop, 2). Returns how many were released.

        A released job's thread may still be running it: it is then in the place of a worker whose
        lease ran out (its handler's writes check the lease, as always: an advance's save is
        refused, ``writes.Lost``), and the job runs again elsewhere: at least once. The process is
        expected to exit next.
        """
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            held = [pair for jobs_held in list(self._held.values()) for pair in jobs_held]
            held += [(job, self.holder_id) for job, _ in self._handed]
            self._handed.clear()
        if not held:
            return 0
        with self.app.app_context():
            try:
                with self.units.begin("worker") as uow:
                    released = jobs.release_unfinished(uow, held)
            except Exception:
                log.exception("could not release the unfinished jobs; their leases will run out")
                return 0
            finally:
                db.session.remove()
        if released:
            log.warning("stopped with %d job(s) unfinished after the grace period: released for another worker",
                        released)
        return released

    def wake(self, ready: Counter | None = None) -> None:
        """Wake threads for ``ready`` jobs (per kind; None: wake every thread): one waiting thread
        per job of its kinds."""
        if ready is not None:
            # Kinds without a handler (a long poll's signal, EXTERNAL_TASKS) are not work for a pool.
            count = sum(n for kind, n in ready.items() if (kind is None or kind in self.handlers)
                        and (self.kinds is None or self.kinds.runs(kind)))
            if not count:
                return
        with self._cond:
            self._signal += 1
            if ready is not None:
                # One thread per ready job at most (a batch-claiming thread may take several):
                # waking every thread for one job made the others run empty claims, each a
                # write transaction on SQLite. A busy thread claims again when it is done.
                self._cond.notify(count)
            else:
                self._cond.notify_all()

    def accepts(self, kind: str) -> bool:
        """Whether a job of ``kind`` may be handed to this pool (``take``)."""
        return kind in self.handlers and (self.kinds is None or self.kinds.runs(kind)) and not self._stopping.is_set()

    def take(self, job: jobs.ClaimedJob) -> None:
        """A job leased to ``holder_id`` by a transaction of this process that has just committed:
        the next free thread runs it."""
        with self._cond:
            self._handed.append((job, time.monotonic()))
            self._signal += 1
            self._cond.notify(1)

    def _next_handed(self) -> jobs.ClaimedJob | None:
        with self._cond:
            job, taken_at = self._handed.popleft() if self._handed else (None, 0.0)
        if job is not None and time.monotonic() - taken_at > self.lease_seconds / 2:
            # Waited for a thread past half its lease: given back rather than run on a lease
            # that may run out (as a batch's later jobs are).
            self._give_back([job], self.holder_id)
            db.session.remove()
            return None
        return job

    def wake_one(self) -> None:
        """Wake one waiting thread (a busy one sees the signal and claims again when it is done)."""
        with self._cond:
            self._signal += 1
            self._cond.notify(1)

    def _loop(self, worker_id: str) -> None:
        with self.app.app_context():
            while not self._stopping.is_set():
                handed = self._next_handed()
                if handed is not None:
                    self._held[worker_id] = [(handed, self.holder_id)]
                    self._run(handed, self.holder_id)
                    self._held.pop(worker_id, None)
                    db.session.remove()
                    continue
                seen = self._signal
                try:
                    with self.units.begin("claim", on_driver=True, single_write=True) as uow:
                        claimed, next_at = jobs.claim_or_next(uow, worker_id, self.lease_seconds,
                                                              limit=self.claim_batch, kinds=self.kinds)
                except Exception:  # database unreachable or locked for long: wait, then go on
                    log.exception("claiming jobs failed")
                    self._sleep(seen, self.poll_seconds)
                    continue
                if not claimed:
                    self._sleep(seen, self._idle_seconds(next_at))
                    continue
                # A batch's later jobs wait for the earlier ones: past half the lease (or when
                # stopping), give them back rather than run them on a lease that may run out.
                give_back_at = time.monotonic() + self.lease_seconds / 2
                self._run_batch(claimed, worker_id, give_back_at)
                self._held.pop(worker_id, None)
                db.session.remove()

    def _run_batch(self, claimed: list[jobs.ClaimedJob], worker_id: str, give_back_at: float) -> None:
        """Run the jobs of one claim in turn. Several: as a batch, whose waiting saves commit
        together at its end (or once it has run ``BATCH_SAVE_S``); until then their jobs count as
        held (a stop releases them, and the save then finds its lease gone)."""
        batch = len(claimed) > 1
        unsaved_from, batch_began = 0, time.monotonic()
        if batch:
            self._begin_batch(worker_id)
        for index, job in enumerate(claimed):
            if index and batch and time.monotonic() - batch_began > self.BATCH_SAVE_S:
                self._end_batch(worker_id)
                self._begin_batch(worker_id)
                unsaved_from, batch_began = index, time.monotonic()
            self._held[worker_id] = [(held, worker_id) for held in claimed[unsaved_from:]]
            if index and (self._stopping.is_set() or time.monotonic() > give_back_at):
                self._give_back(claimed[index:], worker_id)
                break
            self._run(job, worker_id)
        if batch:
            self._end_batch(worker_id)

    def _begin_batch(self, worker_id: str) -> None:
        for handler in self._batching:
            handler.begin_batch(worker_id)

    def _end_batch(self, worker_id: str) -> None:
        for handler in self._batching:
            for job, exc in end_batch(self.units, handler, worker_id):
                with context.bound(job_id=job.id, tenant_id=job.tenant_id, instance_id=job.instance_id):
                    self._failed(handler, job, worker_id, exc)

    def _run(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        with context.bound(job_id=job.id, tenant_id=job.tenant_id, instance_id=job.instance_id):
            self._run_here(job, worker_id)

    def _run_here(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        handler = self.handlers.get(job.kind)
        try:
            if handler is None:
                raise LookupError(f"no handler for job kind {job.kind!r}")
            run_job(self.units, handler, job, worker_id)
        except Exception as exc:
            self._failed(handler, job, worker_id, exc)

    def _failed(self, handler: JobHandler | None, job: jobs.ClaimedJob, worker_id: str, exc: Exception) -> None:
        """A job whose handler raised (or whose batch's saves could not commit): tried again after
        a growing delay, or given up after ``max_attempts``."""
        log.error("job %s (%s) failed on attempt %s", job.id, job.kind, job.attempts, exc_info=exc)
        try:
            if job.attempts >= self.max_attempts and handler is not None:
                metrics.JOB_GIVE_UPS.labels(job.kind).inc()
                with self.units.begin(f"job:{job.kind}") as uow:
                    handler.give_up(job, worker_id, uow)
            else:
                metrics.JOB_RETRIES.labels(job.kind).inc()
                with self.units.begin("worker") as uow:
                    jobs.release(uow, job, worker_id, delay_seconds=job_backoff(job.attempts),
                                 error=type(exc).__name__)
        except writes.Lost:
            log.info("job %s left worker %s before it could be given up", job.id, worker_id)
        except Exception:
            log.exception("could not release job %s; its lease will run out", job.id)

    def _give_back(self, claimed: list[jobs.ClaimedJob], worker_id: str) -> None:
        for job in claimed:
            try:
                with self.units.begin("worker") as uow:
                    jobs.release(uow, job, worker_id, unclaim=True)
            except Exception:
                log.exception("could not give back job %s; its lease will run out", job.id)

    def _idle_seconds(self, due: datetime | None) -> float:
        """How long to sleep when nothing is ready: until ``due`` (a job's or a lease's end), at
        most the poll interval."""
        if due is None:
            return self.poll_seconds
        return max(0.0, min(self.poll_seconds, (due - utcnow()).total_seconds()))

    def _sleep(self, seen: int, seconds: float) -> None:
        with self._cond:
            if self._signal == seen and not self._stopping.is_set():
                self._cond.wait(seconds)


def run_job(units: Units, handler: JobHandler, job: jobs.ClaimedJob, worker_id: str) -> None:
    """One job as a worker runs it: the handler's unit of work, committed, then the steps it asked
    for, each in a unit of work of its own. A write that lost its race (``writes.Lost``) leaves
    nothing behind and the job goes back to the queue; anything else the handler raised is raised
    (the worker retries the job, or gives up)."""
    owner = f"job:{job.kind}"
    try:
        with units.begin(owner) as uow:
            then = handler.handle(job, worker_id, uow)
        run_steps(units, owner, SYSTEM, then)
    except writes.Lost:
        release_lost(units, job, worker_id)


def end_batch(units: Units, handler, worker_id: str) -> list[tuple[jobs.ClaimedJob, Exception]]:
    """Save what the batch's jobs left waiting with ``handler``, in one unit of work; a job whose save
    was lost goes back to the queue. Returns the jobs of a unit of work that failed (none of them
    saved), with the error, for the worker to retry as failed ones."""
    batch = handler.take_batch(worker_id)
    if batch is None:
        return []
    try:
        with units.begin("batch") as uow:
            lost = handler.save_batch(batch, uow)
    except Exception as exc:  # noqa: BLE001 - every job of the batch is the worker's to retry
        return [(job, exc) for job in batch.jobs]
    for job in lost:
        release_lost(units, job, worker_id)
    return []


def release_lost(units: Units, job: jobs.ClaimedJob, worker_id: str) -> None:
    """The job's instance (or its lease) changed under its handler: nothing of this run stayed; the
    job goes back to the queue for a fresh try (if it is still this worker's)."""
    log.info("instance %s changed under job %s; trying again", job.instance_id, job.id)
    try:
        with units.begin("worker") as uow:
            jobs.release(uow, job, worker_id)
    except Exception:  # noqa: BLE001 - its lease runs out and it is claimed again
        log.exception("could not release job %s; its lease will run out", job.id)
