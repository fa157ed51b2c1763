"""``WorkerPool`` with real threads on a real database: it runs each ready job's handler once,
wakes at once when a commit makes a job ready, gives a failing job back with a growing delay,
and hands it to the handler's ``give_up`` after the last attempt."""
from __future__ import annotations

import threading
import time

from sqlalchemy import select

from engine import jobs
from engine.jobs.wakers import Wakers
from engine.jobs.worker import WorkerPool
from engine.jobs.retry import job_backoff
from engine.store.db import utcnow
from engine.store.models import Job, Tenant
from engine.store.unit_of_work import Units
from tests.unit.conftest import claim

KIND = "unit_test_kind"


class Recorder:
    """A job handler that finishes its jobs, or raises for the first ``failures`` attempts."""

    def __init__(self, failures: int = 0):
        self.failures, self.handled, self.given_up = failures, [], []
        self.done = threading.Event()

    def handle(self, job, worker_id, uow):
        self.handled.append((job.id, job.attempts))
        if job.attempts <= self.failures:
            raise RuntimeError("handler failed")
        jobs.finish(uow, job, worker_id)
        uow.after_commit(self.done.set)

    def give_up(self, job, worker_id, uow):
        self.given_up.append(job.id)
        jobs.finish(uow, job, worker_id)
        uow.after_commit(self.done.set)


def _enqueue(uow) -> int:
    tenant_id = uow.session.execute(select(Tenant.id).limit(1)).scalar_one()
    jobs.enqueue(uow, tenant_id, KIND, payload={})
    # Read before the commit: once committed, the pool may run and delete the job at once.
    job_id = uow.session.execute(select(Job.id).where(Job.kind == KIND)).scalar_one()
    uow.commit()  # wakes the pool (its Wakers, after the commit)
    return job_id


def test_a_committed_job_wakes_the_pool_at_once_and_runs_once(pool_for, uow):
    handler = Recorder()
    pool_for(handler)
    time.sleep(0.2)  # the pool is asleep (poll_seconds=30): only the wake-up can make it run the job
    job_id = _enqueue(uow)
    assert handler.done.wait(5), "the pool was not woken by the commit"
    assert handler.handled == [(job_id, 1)]


def test_a_failing_job_is_retried_then_given_up(pool_for, monkeypatch, uow):
    monkeypatch.setattr("engine.jobs.worker.job_backoff", lambda attempts: 0.0)
    handler = Recorder(failures=99)
    pool_for(handler, max_attempts=3)
    job_id = _enqueue(uow)
    assert handler.done.wait(10)
    assert [attempt for _id, attempt in handler.handled] == [1, 2, 3] and handler.given_up == [job_id]


def test_a_failed_attempt_is_given_back_with_the_policys_delay(pool_for, uow):
    handler = Recorder(failures=1)
    pool_for(handler)
    job_id = _enqueue(uow)
    deadline = time.monotonic() + 10
    while True:  # until the failed attempt is recorded on the row
        row = uow.session.get(Job, job_id)
        given_back = (row.locked_by, row.last_error, row.attempts) == (None, "RuntimeError", 1)
        run_at, now = row.run_at, utcnow()
        uow.rollback()
        if given_back or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert given_back and handler.handled == [(job_id, 1)]
    # Due again after the policy's delay for a first failed attempt (2 s), not at once.
    assert 1.0 < (run_at - now).total_seconds() <= job_backoff(1)


def test_a_pool_is_not_woken_for_kinds_it_has_no_handler_for():
    """A long poll's signal (``EXTERNAL_TASKS``) counts as made ready at commit, and reaches every
    waker; a pool must not spend an empty claim (a write transaction on SQLite) on it."""
    from collections import Counter

    from engine.jobs.wakers import EXTERNAL_TASKS

    pool = WorkerPool(None, {KIND: Recorder()}, units=Units(None), wakers=Wakers(), threads=1, lease_seconds=30,
                      poll_seconds=30)
    pool.wake(Counter({EXTERNAL_TASKS: 1}))
    assert pool._signal == 0
    pool.wake(Counter({KIND: 1, EXTERNAL_TASKS: 1}))
    assert pool._signal == 1


class Blocking(Recorder):
    """A handler whose job takes until ``go`` is set (or ``seconds`` pass)."""

    def __init__(self, seconds: float = 10.0):
        super().__init__()
        self.go, self.seconds, self.started, self.finished = threading.Event(), seconds, threading.Event(), None

    def handle(self, job, worker_id, uow):
        self.started.set()
        self.go.wait(self.seconds)
        self.finished = jobs.finish(uow, job, worker_id)
        uow.after_commit(self.done.set)


def test_stopping_lets_a_job_in_hand_finish_within_the_grace(pool_for, uow):
    handler = Blocking(seconds=0.3)
    pool = pool_for(handler)
    job_id = _enqueue(uow)
    assert handler.started.wait(5)
    began = time.monotonic()
    assert pool.stop(grace_s=10) == 0                    # nothing left to release ...
    assert time.monotonic() - began < 5                  # ... and no waiting out the grace
    assert handler.finished is True and uow.session.get(Job, job_id) is None


def test_stopping_releases_a_job_still_running_after_the_grace_due_at_once(pool_for, uow):
    handler = Blocking()
    pool = pool_for(handler)
    job_id = _enqueue(uow)
    assert handler.started.wait(5)
    began = time.monotonic()
    try:
        assert pool.stop(grace_s=0.3) == 1
        took = time.monotonic() - began
        row = uow.session.get(Job, job_id)
        assert 0.3 <= took < 5
        assert (row.locked_by, row.locked_until, row.attempts) == (None, None, 0)   # no lease, no attempt
        assert row.run_at <= utcnow()                                               # due now
        uow.rollback()
        assert [j.id for j in claim(uow, "other-worker", 30)] == [job_id]                # another worker takes it
    finally:
        handler.go.set()
    assert handler.done.wait(5) and handler.finished is False   # the late finish is refused: the lease is gone


class BatchRecorder:
    """A job handler with batches, as ``Runner``: it records the pool's calls, leaves its jobs in
    hand and finishes them at the batch's end, or fails the batch's unit of work."""

    def __init__(self, commit_fails: bool = False):
        self.calls, self.commit_fails, self.held = [], commit_fails, []
        self.done = threading.Event()

    def begin_batch(self, worker_id):
        self.calls.append("begin")

    def handle(self, job, worker_id, uow):
        self.calls.append(job.id)
        self.held.append(job)

    def take_batch(self, worker_id):
        self.calls.append("end")
        held, self.held = self.held, []
        return Batch(held, worker_id) if held else None

    def save_batch(self, batch, uow):
        if self.commit_fails:
            self.done.set()
            raise RuntimeError("the batch's commit failed")
        for job in batch.jobs:
            jobs.finish(uow, job, batch.worker_id)
        uow.after_commit(self.done.set)
        return []

    def give_up(self, job, worker_id, uow):
        raise AssertionError("not expected")


class Batch:
    def __init__(self, held, worker_id):
        self.jobs, self.worker_id = held, worker_id


def _enqueue_before_the_pool(uow, count: int) -> list[int]:
    tenant_id = uow.session.execute(select(Tenant.id).limit(1)).scalar_one()
    for _ in range(count):
        jobs.enqueue(uow, tenant_id, KIND, payload={})
    uow.commit()
    ids = uow.session.execute(select(Job.id).where(Job.kind == KIND).order_by(Job.id)).scalars().all()
    uow.rollback()
    return ids


def test_the_jobs_of_one_claim_run_as_one_batch(pool_for, uow):
    job_ids = _enqueue_before_the_pool(uow, WorkerPool.CLAIM_BATCH)  # due before the pool's first claim
    handler = BatchRecorder()
    pool_for(handler)
    assert handler.done.wait(5)
    assert handler.calls == ["begin", *job_ids, "end"]
    assert uow.session.execute(select(Job.id).where(Job.kind == KIND)).all() == []
    uow.rollback()


def test_a_batch_whose_commit_failed_gives_every_job_back_with_the_policys_delay(pool_for, uow):
    job_ids = _enqueue_before_the_pool(uow, 3)
    handler = BatchRecorder(commit_fails=True)
    pool_for(handler)
    assert handler.done.wait(5)
    deadline = time.monotonic() + 10
    while True:  # until the pool has given the three back
        rows = uow.session.execute(select(Job.locked_by, Job.last_error, Job.run_at).where(Job.id.in_(job_ids))).all()
        now = utcnow()
        uow.rollback()
        if all(row.last_error for row in rows) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert handler.calls == ["begin", *job_ids, "end"]
    assert [(row.locked_by, row.last_error) for row in rows] == [(None, "RuntimeError")] * 3
    assert all(1.0 < (row.run_at - now).total_seconds() <= job_backoff(1) for row in rows)
