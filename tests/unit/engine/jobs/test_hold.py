"""A job given up for an internal reason fails its instance but is kept, and ``process.retry``
applies it again after the retry (engine.jobs.hold / requeue_held, Runner.give_up), on a real
database (SQLite and PostgreSQL). The test plays the worker: ``jobs.claim``, then the runner."""
from __future__ import annotations

import pytest
from sqlalchemy import select

from engine import instances, jobs
from engine.jobs.kinds import RETRY, START
from engine.runtime.runner import Runner
from engine.store.db import db
from engine.store.models import Instance, Job
from tests.unit.conftest import deploy_for_new_tenant, claim

WORKER = "unit-worker"


@pytest.fixture
def started(app, uow):
    """A fresh instance whose start job is claimed by WORKER, as a worker that keeps failing holds it."""
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "wait_for_person.bpmn")
        definition = instances.resolve_definition(uow, tenant_id, deployed["definition_id"])
        instance_id = instances.start(uow, tenant_id, definition, {"order": 7})["instance_id"]
        [job] = claim(uow, WORKER, 30)
        yield tenant_id, instance_id, job
        uow.rollback()
        db.session.remove()


def test_a_given_up_job_fails_the_instance_and_is_held_not_claimable(started, uow):
    tenant_id, instance_id, job = started
    Runner(None, None, ()).give_up(job, WORKER, uow)
    uow.commit()

    assert uow.session.get(Instance, instance_id).status == "failed"
    held = uow.session.execute(select(Job).where(Job.instance_id == instance_id)).scalar_one()
    assert (held.id, held.run_at, held.locked_by) == (job.id, jobs.HELD_UNTIL, None)
    assert claim(uow, WORKER, 30, limit=10) == []


def test_process_retry_queues_the_held_job_again_after_the_retry_with_its_payload(started, uow):
    tenant_id, instance_id, job = started
    Runner(None, None, ()).give_up(job, WORKER, uow)
    uow.commit()
    instances.retry(uow, tenant_id, instance_id, {"note": "fixed"})

    [first] = claim(uow, WORKER, 30, limit=10)  # one job of an instance at a time, in order
    # It never saved: the retry begins it again at the start event its held start job names.
    assert (first.kind, first.payload) == (RETRY, {"variables": {"note": "fixed"},
                                                   "start_event": job.payload["start_event"]})
    jobs.finish(uow, first, WORKER)
    uow.commit()
    [second] = claim(uow, WORKER, 30, limit=10)
    assert (second.kind, second.payload, second.attempts) == (START, job.payload, 1)
    assert second.id > first.id


def test_a_job_of_an_instance_that_had_already_ended_is_dropped(started, uow):
    tenant_id, instance_id, job = started
    instances.cancel(uow, tenant_id, instance_id)  # deletes the instance's jobs (the claimed one too)
    Runner(None, None, ()).give_up(job, WORKER, uow)
    uow.commit()

    assert uow.session.get(Instance, instance_id).status == "cancelled"
    assert uow.session.execute(select(Job).where(Job.instance_id == instance_id)).first() is None


def test_a_timer_start_firing_given_up_is_skipped_and_its_cycle_goes_on(app, uow):
    from engine.runtime.timer_starts import TIMER_START, TimerStartRunner

    with app.app_context():
        tenant_id, _deployed = deploy_for_new_tenant(uow, "cov_timer_start.bpmn")  # R3/PT1H
        scheduled = uow.session.execute(select(Job).where(Job.kind == TIMER_START)).scalar_one()
        scheduled.run_at = scheduled.run_at.replace(year=2000)  # due now
        uow.commit()
        [job] = claim(uow, WORKER, 30)
        TimerStartRunner().give_up(job, WORKER, uow)
        uow.commit()

        [following] = uow.session.execute(select(Job).where(Job.kind == TIMER_START)).scalars().all()
        assert following.id != job.id and following.payload["runs_left"] == job.payload["runs_left"] - 1
        assert following.payload["due"] > job.payload["due"]
        assert uow.session.execute(select(Instance).where(Instance.tenant_id == tenant_id)).first() is None
        db.session.remove()
