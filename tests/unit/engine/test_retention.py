"""Retention's selection (``engine.retention.Purging``, run batch by batch as the command runs it)
on both databases, with rows as the engine writes them: what a pending or held HTTP-task or thrown
job protects, and the job's schedule."""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from cli import purge_now
from engine import jobs, retention
from engine.jobs.kinds import OPERATOR, RETENTION, THROWN
from engine.store.db import db, utcnow
from engine.store.models import Instance, Job
from tests.unit.conftest import deploy_for_new_tenant

DAYS_30 = timedelta(days=30)


def ended(tenant_id: int, definition_id: int, days_ago: float, status: str = "completed") -> int:
    at = utcnow() - timedelta(days=days_ago)
    row = Instance(tenant_id=tenant_id, definition_id=definition_id, status=status, variables={},
                   waiting_for=[], started_at=at, completed_at=at)
    db.session.add(row)
    db.session.flush()
    return row.id


def remaining(ids: list[int]) -> set[int]:
    found = set(db.session.execute(select(Instance.id).where(Instance.id.in_(ids))).scalars())
    db.session.rollback()
    return found


def test_a_pending_http_call_protects_what_ended_after_it_was_queued_and_a_held_one_only_its_own(app, uow):
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "webhook_order.bpmn")
        definition = deployed["definition_id"]
        oldest = ended(tenant_id, definition, 40)
        older = ended(tenant_id, definition, 35, "failed")
        old = ended(tenant_id, definition, 32, "cancelled")
        recent = ended(tenant_id, definition, 1)
        # An HTTP task's call queued 36 days ago, still pending: what ended after that stays.
        jobs.enqueue(uow, tenant_id, OPERATOR, payload={"instance_id": older})
        uow.session.flush()
        uow.session.execute(Job.__table__.update().where(Job.kind == OPERATOR)
                           .values(created_at=utcnow() - timedelta(days=36)))
        uow.commit()

        units = app.extensions["baton.units"]
        removed = purge_now(units, DAYS_30, rest=0).removed
        assert removed["instances"] == 1 and remaining([oldest, older, old, recent]) == {older, old, recent}

        # The call is done; a thrown job kept aside (held) for `old` keeps only `old`.
        uow.session.execute(Job.__table__.delete().where(Job.kind == OPERATOR))
        jobs.enqueue(uow, tenant_id, THROWN, payload={"instance_id": old, "events": []}, run_at=jobs.HELD_UNTIL)
        uow.commit()
        assert purge_now(units, DAYS_30, rest=0).removed["instances"] == 1
        assert remaining([older, old, recent]) == {old, recent}


def test_the_schedule_is_one_job_however_often_it_is_asked_for(app, uow):
    with app.app_context():
        deploy_for_new_tenant(uow, "webhook_order.bpmn")  # (clears every job)
        assert retention.schedule(uow) is True
        assert retention.schedule(uow) is False
        count = uow.session.execute(select(func.count()).select_from(Job).where(Job.kind == RETENTION)).scalar()
        uow.rollback()
        assert count == 1


def test_audit_entries_go_after_their_own_horizon_and_stay_without_one(app, uow):
    from engine import audit
    from engine.store.models import AuditEntry

    with app.app_context():
        tenant_id, _ = deploy_for_new_tenant(uow, "webhook_order.bpmn")
        now = utcnow()
        for days in (400, 100, 1):
            audit.record(uow, tenant_id, actor_type="api_key", actor="admin", key_id=None, method=f"m{days}",
                         target_kind=None, target_id=None, at=now - timedelta(days=days))
        uow.commit()

        def methods() -> set[str]:
            found = set(uow.session.execute(select(AuditEntry.method).where(AuditEntry.tenant_id == tenant_id))
                        .scalars())
            uow.rollback()
            return found

        units = app.extensions["baton.units"]
        assert purge_now(units, DAYS_30, rest=0).removed["audit_log"] == 0        # no horizon: kept
        assert methods() == {"m400", "m100", "m1"}
        assert purge_now(units, DAYS_30, rest=0, audit_kept=timedelta(days=365)).removed["audit_log"] >= 1
        assert methods() == {"m100", "m1"}                                         # 365 days, not the 30
