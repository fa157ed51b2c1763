"""An instance's history rows (``engine.store.history``): one event or several in one statement,
on the ORM session and on the driver connection alike, committed and rolled back with the unit of
work that records them, and gone with their instance."""
from __future__ import annotations

import pytest
from sqlalchemy import delete, select, update

from engine.jobs.kinds import START
from engine.store import history, writes
from engine.store.db import db
from engine.store.models import HistoryEvent, Instance, Job
from engine.store.unit_of_work import Actor, Units
from tests.unit.conftest import deploy_for_new_tenant


@pytest.fixture
def instance(app, uow):
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "webhook_order.bpmn")
        instance_id = writes.create_instance(uow, tenant_id, deployed["definition_id"], {}, START)
        uow.commit()
        yield tenant_id, instance_id
        uow.rollback()
        db.session.remove()


def _events(instance_id: int) -> list[tuple]:
    rows = db.session.execute(
        select(HistoryEvent.kind, HistoryEvent.element_id, HistoryEvent.actor, HistoryEvent.detail)
        .where(HistoryEvent.instance_id == instance_id).order_by(HistoryEvent.id)).all()
    db.session.rollback()
    return [tuple(row) for row in rows]


def test_creating_an_instance_records_its_start_with_the_unit_of_works_actor(app, uow):
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "webhook_order.bpmn")
        uow.commit()
        _start_by_webhook(tenant_id, deployed)


def _start_by_webhook(tenant_id, deployed):
    with Units(None, engine=db.engine).begin("test", Actor("webhook", "ab12cd34"), on_driver=True,
                                             single_write=True) as driver:
        instance_id = writes.create_instance(driver, tenant_id, deployed["definition_id"], {}, START,
                                             {"start_event": "StartEvent_1"})
    assert _events(instance_id) == [("started", None, {"type": "webhook", "name": "ab12cd34"}, {})]


def test_record_names_the_unit_of_works_actor_unless_given_one(instance, uow):
    tenant_id, instance_id = instance
    uow.actor = Actor("api_key", "ops")
    history.record(uow, tenant_id=tenant_id, instance_id=instance_id, kind="cancelled")
    history.record(uow, tenant_id=tenant_id, instance_id=instance_id, kind="failed", element_id="Task_1",
                   actor=Actor("system", "baton"), detail={"message": "boom"})
    uow.commit()
    assert _events(instance_id)[1:] == [
        ("cancelled", None, {"type": "api_key", "name": "ops"}, {}),
        ("failed", "Task_1", {"type": "system", "name": "baton"}, {"message": "boom"})]


def test_record_many_writes_one_statement_on_the_driver_and_rolls_back_with_its_unit(app, instance):
    tenant_id, instance_id = instance
    units = Units(None, engine=db.engine)
    rows = [history.event(tenant_id=tenant_id, instance_id=instance_id, kind=kind, actor=history_actor)
            for kind, history_actor in (("started", Actor("webhook", "ab12cd34")), ("completed", Actor("system", "baton")))]
    with pytest.raises(RuntimeError):
        with units.begin("test", on_driver=True) as driver:
            history.record_many(driver, rows)
            raise RuntimeError("the unit of work fails")
    assert [event[0] for event in _events(instance_id)] == ["started"]  # the instance's own, at its creation
    with units.begin("test", on_driver=True) as driver:
        history.record_many(driver, rows)
    assert [event[0] for event in _events(instance_id)] == ["started", "started", "completed"]


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError):
        history.event(tenant_id=1, instance_id=1, kind="exploded", actor=Actor("system", "baton"))


def test_the_database_writes_the_completion_when_the_status_becomes_completed(instance, uow):
    tenant_id, instance_id = instance
    for status in ("failed", "running", "completed", "completed"):
        uow.execute(update(Instance).where(Instance.id == instance_id).values(status=status))
        uow.commit()
    assert [event[0] for event in _events(instance_id)] == ["started", "completed"]
    assert _events(instance_id)[1][2] == {"type": "system", "name": "baton"}


def test_the_history_goes_with_its_instance(instance, uow):
    tenant_id, instance_id = instance
    history.record(uow, tenant_id=tenant_id, instance_id=instance_id, kind="started")
    uow.commit()
    uow.execute(delete(Job).where(Job.instance_id == instance_id))
    uow.execute(delete(Instance).where(Instance.id == instance_id))
    uow.commit()
    assert _events(instance_id) == []
