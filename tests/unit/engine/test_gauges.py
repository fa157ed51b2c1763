"""The gauges read at scrape time (``engine.gauges``) describe the database as it is, on SQLite and
PostgreSQL: the queue in all and by kind (depth, age of the oldest due job), dead deliveries."""
from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import delete

from engine import jobs
from engine.auth import create_tenant
from engine.gauges import DatabaseGauges
from engine.store.db import utcnow
from engine.store.models import Delivery, Job


def collected(uow) -> dict[str, float]:
    """The gauges as a scrape reads them, in ``uow`` (which they leave with no transaction open)."""
    values = {}
    for family in DatabaseGauges(uow).collect():
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


def test_the_queue_gauges_count_due_running_and_waiting_jobs_by_kind(app, uow):
    with app.app_context():
        uow.session.execute(delete(Job))
        uow.commit()
        before = collected(uow)  # dead deliveries and dialogs other tests left (they share the database)
        tenant, _key = create_tenant(uow, f"g-{uuid.uuid4().hex[:8]}")
        now = utcnow()
        uow.session.add_all([
            Job(tenant_id=tenant.id, kind="start", run_at=now - timedelta(seconds=40)),
            Job(tenant_id=tenant.id, kind="start", run_at=now - timedelta(seconds=5)),
            Job(tenant_id=tenant.id, kind="deliver", run_at=now - timedelta(seconds=12)),
            Job(tenant_id=tenant.id, kind="timer", run_at=now + timedelta(hours=1)),        # not due
            Job(tenant_id=tenant.id, kind="deliver", run_at=jobs.HELD_UNTIL),               # held
            Job(tenant_id=tenant.id, kind="start", run_at=now - timedelta(seconds=90),      # running
                locked_until=now + timedelta(seconds=30), locked_by="w"),
        ])
        uow.session.add(Delivery(tenant_id=tenant.id, ordering_key="k", delivery_uid=uuid.uuid4().hex, url="http://x",
                                body="{}", status="dead"))
        uow.commit()
        try:
            values = collected(uow)
        finally:
            uow.session.execute(delete(Job))
            uow.session.execute(delete(Delivery).where(Delivery.tenant_id == tenant.id))
            uow.commit()
    assert (values["baton_jobs_pending"], values["baton_jobs_due"], values["baton_jobs_running"]) == (6, 3, 1)
    assert values['baton_job_queue_depth{kind="start"}'] == 2
    assert values['baton_job_queue_depth{kind="deliver"}'] == 1
    assert 'baton_job_queue_depth{kind="timer"}' not in values
    assert 39 <= values['baton_job_oldest_due_age_seconds{kind="start"}'] < 60  # the running one is not waiting
    assert 11 <= values['baton_job_oldest_due_age_seconds{kind="deliver"}'] < 30
    assert values["baton_deliveries_dead"] == before["baton_deliveries_dead"] + 1
    assert values["baton_ai_dialogs_active"] == before["baton_ai_dialogs_active"]


def test_an_empty_queue_reads_zero_and_no_kind(app, uow):
    with app.app_context():
        uow.session.execute(delete(Job))
        uow.commit()
        values = collected(uow)
    assert (values["baton_jobs_pending"], values["baton_jobs_due"], values["baton_jobs_running"]) == (0, 0, 0)
    assert not [name for name in values if name.startswith("baton_job_queue_depth")]
