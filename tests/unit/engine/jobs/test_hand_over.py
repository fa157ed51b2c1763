"""Jobs handed over at commit: a job due now, of no instance, that a pool of this process runs is
leased to that pool in the transaction that queues it and run without a claim. Its row must be the
row a claim would have left, and every way out (rollback, a stop, a long wait) must leave it to
be claimed as any other job."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import delete, select

from engine import jobs
from engine.jobs.wakers import Wakers
from engine.jobs.worker import WorkerPool
from engine.store.db import WAKERS, db, utcnow
from engine.store.models import Job, Tenant

KIND = "unit_hand_over"
ROW = ("tenant_id", "instance_id", "kind", "payload", "attempts", "last_error")


class Gate:
    """A handler that records each job (and the worker id it runs under), then waits for
    ``release`` before it finishes the job."""

    def __init__(self, hold: bool = True):
        self.handled: list[tuple[int, str, int]] = []
        self.rows: dict[int, dict] = {}
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def handle(self, job, worker_id):
        self.rows[job.id] = _row(job.id)
        self.handled.append((job.id, worker_id, job.attempts))
        self.started.set()
        self.release.wait(10)
        jobs.finish(job, worker_id)
        db.session.commit()

    def give_up(self, job, worker_id):
        jobs.finish(job, worker_id)
        db.session.commit()


@pytest.fixture
def setup(app):
    pools: list[WorkerPool] = []
    wakers = app.extensions[WAKERS] = Wakers()

    def start(handler, lease_seconds: float = 30) -> WorkerPool:
        pool = WorkerPool(app, {KIND: handler}, wakers=wakers, threads=1, lease_seconds=lease_seconds,
                          poll_seconds=30)
        pool.start()
        pools.append(pool)
        return pool

    with app.app_context():
        db.session.execute(delete(Job))
        if db.session.execute(select(Tenant.id).limit(1)).scalar() is None:
            db.session.add(Tenant(name="hand-over-tests"))
        db.session.commit()
        yield start
        for pool in pools:
            pool.stop(grace_s=1)
        db.session.execute(delete(Job))
        db.session.commit()
        db.session.remove()
    del app.extensions[WAKERS]


def _tenant() -> int:
    return db.session.execute(select(Tenant.id).limit(1)).scalar_one()


def _row(job_id: int) -> dict:
    row = db.session.get(Job, job_id)
    values = {name: getattr(row, name) for name in (*ROW, "locked_by", "locked_until", "run_at")}
    db.session.rollback()
    return values


def _wait(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_handed_job_is_the_row_and_the_job_a_claim_would_have_given(setup):
    # The general path first: no pool here, an ordinary job, leased by a claim.
    tenant_id = _tenant()
    jobs.enqueue(tenant_id, KIND, payload={"delivery_id": 7, "secret": "s"})
    db.session.commit()
    [claimed] = jobs.claim("claiming-worker", 30)
    claimed_row = _row(claimed.id)
    db.session.execute(delete(Job))
    db.session.commit()

    gate = Gate()
    pool = setup(gate)
    before = utcnow()
    jobs.enqueue(tenant_id, KIND, payload={"delivery_id": 7, "secret": "s"})
    db.session.commit()
    assert gate.started.wait(10)
    [(job_id, worker_id, attempts)] = gate.handled
    handed_row = gate.rows[job_id]
    gate.release.set()

    assert worker_id == pool.holder_id and handed_row["locked_by"] == pool.holder_id
    assert {name: handed_row[name] for name in ROW} == {name: claimed_row[name] for name in ROW}
    assert attempts == claimed.attempts == 1
    assert before + timedelta(seconds=29) <= handed_row["locked_until"] <= utcnow() + timedelta(seconds=30)
    assert handed_row["run_at"] <= handed_row["locked_until"] - timedelta(seconds=29)
    _wait(lambda: _jobs_left() == 0)                  # finished under the lease it was handed


def _jobs_left() -> int:
    count = len(db.session.execute(select(Job.id)).all())
    db.session.rollback()
    return count


def test_a_rolled_back_job_is_neither_stored_nor_handed(setup):
    gate = Gate(hold=False)
    setup(gate)
    jobs.enqueue(_tenant(), KIND, payload={})
    db.session.rollback()
    jobs.enqueue(_tenant(), KIND, payload={"second": True})  # the next commit hands this one only
    db.session.commit()
    _wait(lambda: len(gate.handled) == 1)
    time.sleep(0.2)
    assert len(gate.handled) == 1
    assert db.session.execute(select(Job.id)).all() == []


def test_a_delayed_job_is_queued_for_a_claim_not_handed(setup):
    gate = Gate(hold=False)
    setup(gate)
    jobs.enqueue(_tenant(), KIND, payload={}, run_at=utcnow() + timedelta(hours=1))
    db.session.commit()
    [row] = db.session.execute(select(Job)).scalars().all()
    assert (row.locked_by, row.locked_until, row.attempts) == (None, None, 0)
    db.session.rollback()
    time.sleep(0.2)
    assert gate.handled == []


def test_a_stop_releases_handed_jobs_that_no_thread_ran_yet(setup):
    gate = Gate()
    pool = setup(gate)
    for number in range(2):
        jobs.enqueue(_tenant(), KIND, payload={"n": number})
        db.session.commit()
    assert gate.started.wait(10)
    [(running, _, _)] = gate.handled             # the pool's one thread holds the first
    waiting = db.session.execute(select(Job.id).where(Job.id != running)).scalar_one()
    db.session.rollback()

    assert pool.stop(grace_s=0.2) == 2           # the running one after the grace, and the waiting one
    for job_id in (running, waiting):
        row = _row(job_id)
        assert (row["locked_by"], row["locked_until"], row["attempts"]) == (None, None, 0)
        assert row["run_at"] <= utcnow()
    gate.release.set()


def test_a_handed_job_that_waited_past_half_its_lease_is_given_back_and_claimed(setup):
    gate = Gate()
    pool = setup(gate, lease_seconds=0.6)
    for number in range(2):
        jobs.enqueue(_tenant(), KIND, payload={"n": number})
        db.session.commit()
    assert gate.started.wait(10)
    time.sleep(0.45)                             # the second waits past half its lease (0.3 s)
    gate.release.set()
    _wait(lambda: len(gate.handled) == 2)
    (_, first_worker, _), (_, second_worker, attempts) = gate.handled
    assert first_worker == pool.holder_id
    assert second_worker != pool.holder_id       # given back, then claimed by the thread itself
    assert attempts == 1                         # the unused hand-over was not counted as a try
