"""The job queue on a real database (SQLite and PostgreSQL), the test playing the workers: an
instance's jobs run one at a time and in order, a lease that runs out frees its job, a pool runs
only its kinds, and a job given back before it ran is not counted as an attempt."""
from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import delete, select, update

from engine import jobs
from engine.jobs.kinds import DELIVER, MESSAGE, START, TIMER
from engine.store.db import db, utcnow
from engine.store.models import Job
from tests.unit.conftest import deploy_for_new_tenant, claim
from engine import instances


@pytest.fixture
def instance(app, uow):
    """A tenant with one running instance whose start job is queued; the queue holds nothing else."""
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "wait_for_person.bpmn")
        definition = instances.resolve_definition(uow, tenant_id, deployed["definition_id"])
        instance_id = instances.start(uow, tenant_id, definition, {})["instance_id"]
        yield tenant_id, instance_id, definition
        uow.rollback()
        uow.session.execute(delete(Job))
        uow.commit()
        db.session.remove()


def test_an_instances_jobs_are_claimed_one_at_a_time_in_order(instance, uow):
    tenant_id, instance_id, _definition = instance
    jobs.enqueue(uow, tenant_id, MESSAGE, instance_id=instance_id, payload={"n": 1})
    uow.commit()
    [first] = claim(uow, "w1", 30, limit=5)
    assert first.kind == START and first.instance_row.id == instance_id
    assert claim(uow, "w2", 30, limit=5) == []  # the message waits while the start is leased
    assert jobs.finish(uow, first, "w1")
    uow.commit()
    [second] = claim(uow, "w2", 30, limit=5)
    assert (second.kind, second.payload) == (MESSAGE, {"n": 1})


def test_a_lease_that_runs_out_frees_the_job_for_another_worker(instance, uow):
    [job] = claim(uow, "dead-worker", 30)
    uow.session.execute(update(Job).where(Job.id == job.id).values(locked_until=utcnow() - timedelta(seconds=1)))
    uow.commit()
    [again] = claim(uow, "live-worker", 30)
    assert again.id == job.id and again.attempts == 2
    assert not jobs.finish(uow, job, "dead-worker")  # the dead worker's late finish changes nothing
    uow.rollback()
    assert jobs.finish(uow, again, "live-worker")
    uow.commit()


def test_a_pool_claims_only_its_kinds(instance, uow):
    tenant_id, _instance_id, _definition = instance
    jobs.enqueue(uow, tenant_id, DELIVER, payload={"delivery_id": 0})
    uow.commit()
    calls = jobs.KindFilter(frozenset({DELIVER}), include=True)
    [delivery] = claim(uow, "call-thread", 30, limit=5, kinds=calls)
    [start] = claim(uow, "engine-thread", 30, limit=5, kinds=jobs.KindFilter(frozenset({DELIVER}), include=False))
    assert (delivery.kind, start.kind) == (DELIVER, START)


def test_a_delayed_job_is_not_claimed_before_it_is_due_and_tells_when_to_look_again(instance, uow):
    tenant_id, instance_id, _definition = instance
    [start] = claim(uow, "w", 30)
    jobs.finish(uow, start, "w")
    due = utcnow() + timedelta(minutes=5)
    jobs.enqueue(uow, tenant_id, TIMER, instance_id=instance_id, run_at=due)
    uow.commit()
    claimed, next_at = jobs.claim_or_next(uow, "w", 30)
    assert claimed == []
    assert abs((next_at - due).total_seconds()) < 1


def test_a_job_given_back_unrun_keeps_its_attempts_and_a_released_one_waits_its_delay(instance, uow):
    [job] = claim(uow, "w", 30)
    jobs.release(uow, job, "w", unclaim=True)
    [again] = claim(uow, "w", 30)
    assert again.attempts == job.attempts
    jobs.release(uow, again, "w", delay_seconds=60, error="Boom")
    row = uow.session.execute(select(Job).where(Job.id == job.id)).scalar_one()
    assert (row.locked_by, row.last_error) == (None, "Boom") and row.run_at > utcnow() + timedelta(seconds=50)
    uow.rollback()
    assert claim(uow, "w", 30) == []


def test_a_claim_returns_the_rows_a_plain_read_finds(instance, uow):
    """The claim leases and reads in one statement on PostgreSQL (two on SQLite): the job and the
    instance row it hands over are those of the table, oldest due first, jobs of no instance too."""
    from engine.jobs.queue import INSTANCE_COLUMNS
    from engine.store.models import Instance

    tenant_id, instance_id, _definition = instance
    jobs.enqueue(uow, tenant_id, DELIVER, payload={"delivery_id": 7}, run_at=utcnow() - timedelta(seconds=5))
    uow.commit()
    claimed = claim(uow, "w1", 30, limit=4)
    assert [job.kind for job in claimed] == [DELIVER, START]  # (run_at, id) order
    deliver, start = claimed
    assert deliver.instance_id is None and deliver.instance_row is None and deliver.payload == {"delivery_id": 7}
    for job in claimed:
        row = uow.session.execute(select(Job).where(Job.id == job.id)).scalar_one()
        assert (row.tenant_id, row.instance_id, row.kind, row.payload, row.attempts, row.locked_by) == \
            (job.tenant_id, job.instance_id, job.kind, job.payload, job.attempts, "w1") and job.attempts == 1
    table = uow.session.execute(select(*[Instance.__table__.c[name] for name in INSTANCE_COLUMNS])
                               .where(Instance.id == instance_id)).one()
    assert tuple(start.instance_row) == tuple(table) and start.instance_row.revision == 0
    uow.rollback()
