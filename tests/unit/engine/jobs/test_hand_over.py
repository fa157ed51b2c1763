"""Jobs handed over at commit: a job due now, of no instance, that a pool of this process runs is
leased to that pool in the transaction that queues it and run without a claim. Its row must be the
row a claim would have left, and every way out (rollback, a stop, a long wait) must leave it to
be claimed as any other job."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

from sqlalchemy import delete, select

from engine import jobs
from engine.store.db import db, utcnow
from engine.store.models import Job, Tenant
from tests.unit.conftest import claim

KIND = "unit_hand_over"
ROW = ("tenant_id", "instance_id", "kind", "payload", "attempts", "last_error")


class Gate:
    """A handler that records each job (and the worker id it runs under), then waits for
    ``release`` before it finishes the job."""

    def __init__(self, hold: bool = True):
        self.handled: list[tuple[int, str, int]] = []
        self.rows: dict[int, dict] = {}
        self.payloads: dict[int, dict] = {}
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def handle(self, job, worker_id, uow):
        self.rows[job.id] = _row(uow, job.id)
        uow.end_read()  # nothing held (SQLite's write lock) while it waits
        self.handled.append((job.id, worker_id, job.attempts))
        self.payloads[job.id] = job.payload  # after handled: a sentinel seen here is in handled
        self.started.set()
        self.release.wait(10)
        jobs.finish(uow, job, worker_id)

    def give_up(self, job, worker_id, uow):
        jobs.finish(uow, job, worker_id)


def _tenant() -> int:
    tenant_id = db.session.execute(select(Tenant.id).limit(1)).scalar_one()
    db.session.rollback()
    return tenant_id


def _row(uow, job_id: int) -> dict:
    row = uow.session.get(Job, job_id, populate_existing=True)
    return {name: getattr(row, name) for name in (*ROW, "locked_by", "locked_until", "run_at")}


def _sentinel_handled(uow, gate: "Gate") -> int:
    """Queue one more job due now and wait until the pool ran it: the pool's one thread runs what it
    is handed in order, so whatever it was handed before has been run by then. Its id."""
    jobs.enqueue(uow, _tenant(), KIND, payload={"sentinel": True})
    uow.commit()
    # Known by its payload: the pool may run and delete it before its id could be read back.
    _wait(lambda: any(payload.get("sentinel") for payload in list(gate.payloads.values())))
    return next(job_id for job_id, payload in list(gate.payloads.items()) if payload.get("sentinel"))


def _wait(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_handed_job_is_the_row_and_the_job_a_claim_would_have_given(pool_for, uow):
    # The general path first: no pool here, an ordinary job, leased by a claim.
    tenant_id = _tenant()
    jobs.enqueue(uow, tenant_id, KIND, payload={"delivery_id": 7, "secret": "s"})
    uow.commit()
    [claimed] = claim(uow, "claiming-worker", 30)
    claimed_row = _row(uow, claimed.id)
    uow.session.execute(delete(Job))
    uow.commit()

    gate = Gate()
    pool = pool_for(gate)
    before = utcnow()
    jobs.enqueue(uow, tenant_id, KIND, payload={"delivery_id": 7, "secret": "s"})
    uow.commit()
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


def test_a_rolled_back_job_is_neither_stored_nor_handed(pool_for, uow):
    gate = Gate(hold=False)
    pool_for(gate)
    jobs.enqueue(uow, _tenant(), KIND, payload={})
    uow.rollback()
    jobs.enqueue(uow, _tenant(), KIND, payload={"second": True})  # the next commit hands this one only
    uow.commit()
    _sentinel_handled(uow, gate)
    assert len(gate.handled) == 2                # the second job and the sentinel, never the first
    _wait(lambda: _jobs_left() == 0)


def test_a_delayed_job_is_queued_for_a_claim_not_handed(pool_for, uow):
    gate = Gate(hold=False)
    pool_for(gate)
    jobs.enqueue(uow, _tenant(), KIND, payload={}, run_at=utcnow() + timedelta(hours=1))
    uow.commit()
    [row] = uow.session.execute(select(Job)).scalars().all()
    assert (row.locked_by, row.locked_until, row.attempts) == (None, None, 0)
    uow.rollback()
    sentinel = _sentinel_handled(uow, gate)
    assert [job_id for job_id, _, _ in gate.handled] == [sentinel]


def test_a_stop_releases_handed_jobs_that_no_thread_ran_yet(pool_for, uow):
    gate = Gate()
    pool = pool_for(gate)
    for number in range(2):
        jobs.enqueue(uow, _tenant(), KIND, payload={"n": number})
        uow.commit()
    assert gate.started.wait(10)
    [(running, _, _)] = gate.handled             # the pool's one thread holds the first
    waiting = uow.session.execute(select(Job.id).where(Job.id != running)).scalar_one()
    uow.rollback()

    assert pool.stop(grace_s=0.2) == 2           # the running one after the grace, and the waiting one
    for job_id in (running, waiting):
        row = _row(uow, job_id)
        assert (row["locked_by"], row["locked_until"], row["attempts"]) == (None, None, 0)
        assert row["run_at"] <= utcnow()
    gate.release.set()


def test_a_handed_job_that_waited_past_half_its_lease_is_given_back_and_claimed(pool_for, uow):
    gate = Gate()
    pool = pool_for(gate, lease_seconds=0.6)
    for number in range(2):
        jobs.enqueue(uow, _tenant(), KIND, payload={"n": number})
        uow.commit()
    assert gate.started.wait(10)
    time.sleep(0.45)                             # the second waits past half its lease (0.3 s)
    gate.release.set()
    _wait(lambda: len(gate.handled) == 2)
    (_, first_worker, _), (_, second_worker, attempts) = gate.handled
    assert first_worker == pool.holder_id
    assert second_worker != pool.holder_id       # given back, then claimed by the thread itself
    assert attempts == 1                         # the unused hand-over was not counted as a try
