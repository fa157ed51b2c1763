"""External-task rows with the instance state, on a real database, the test playing the worker:
an advance opens a row with the task's variables; a worker's report queues the job that applies
it; a report for an instance that failed meanwhile is kept and applied after process.retry (its
row is already completed, so nothing else would bring the task back)."""
from __future__ import annotations

import pytest
from sqlalchemy import select, update

from app import advance_contributors
from engine import external_tasks, instances, jobs
from engine.jobs.kinds import EXTERNAL_RESULT
from engine.jobs.wakers import LongPoll
from engine.jobs.worker import run_job
from engine.runtime.runner import Runner
from engine.store.db import db
from engine.store.models import ExternalTaskRow, Instance, Job
from engine.store.workflows import SpecCache
from tests.unit.conftest import deploy_for_new_tenant, claim

WORKER = "unit-worker"


@pytest.fixture
def invoicing(app, script_engine, uow):
    """A tenant, an instance waiting at its external task, and a function running the due jobs."""
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "external_invoice.bpmn")
        definition = instances.resolve_definition(uow, tenant_id, deployed["definition_id"])
        runner = Runner(script_engine, SpecCache(), advance_contributors("http://127.0.0.1"))

        def run_due() -> list[str]:
            ran = []
            while claimed := claim(uow, WORKER, 30, limit=1):
                ran.append(claimed[0].kind)
                run_job(app.extensions["baton.units"], runner, claimed[0], WORKER)
            return ran

        instance_id = instances.start(uow, tenant_id, definition, {"order_id": 7})["instance_id"]
        run_due()
        yield tenant_id, instance_id, run_due
        uow.rollback()
        db.session.remove()


def _row(instance_id: int) -> ExternalTaskRow:
    row = db.session.execute(select(ExternalTaskRow).where(ExternalTaskRow.instance_id == instance_id)).scalar_one()
    db.session.rollback()
    return row


def test_an_advance_opens_a_row_with_the_variables_the_task_sees(invoicing):
    _tenant_id, instance_id, _run = invoicing
    row = _row(instance_id)
    assert (row.element_id, row.topic, row.status, row.variables) == ("invoice", "invoiceCreator", "open",
                                                                      {"order_id": 7})
    assert row.worker_id is None and row.retries is None


def test_a_report_for_an_instance_that_failed_meanwhile_is_applied_after_the_retry(invoicing, uow):
    tenant_id, instance_id, run_due = invoicing
    [task] = external_tasks.fetch_and_lock(uow, tenant_id, WORKER, {"invoiceCreator": 30_000}, max_tasks=1, wait_ms=0,
                                           long_poll=LongPoll(1))["tasks"]
    external_tasks.complete(uow, tenant_id, task["task_id"], WORKER, {"invoice": "INV-7"})
    # Another branch failed the instance before the report was applied (as Runner.give_up does).
    uow.session.execute(update(Instance).where(Instance.id == instance_id).values(status="failed"))
    uow.commit()
    assert run_due() == [EXTERNAL_RESULT]
    held = uow.session.execute(select(Job.kind, Job.run_at).where(Job.instance_id == instance_id)).all()
    assert held == [(EXTERNAL_RESULT, jobs.HELD_UNTIL)]
    uow.rollback()
    instances.retry(uow, tenant_id, instance_id, None)
    assert run_due() == ["retry", EXTERNAL_RESULT]
    status = instances.status(uow, tenant_id, instance_id)
    assert status["status"] == "running" and status["variables"]["invoice"] == "INV-7"
    assert [e["element_id"] for e in status["waiting_for"]] == ["check"]
    assert _row(instance_id).status == "completed"
