"""``task_counts`` (migration 0014's triggers) always equals a ``count(*)`` of the tasks, per
tenant, definition and status: after inserts (one by one and many in one statement), status
changes, a change that leaves the status as it was, deletes, and the deletes that cascade from a
removed instance; and ``task.list``'s totals are those counts."""
from __future__ import annotations

import uuid

from sqlalchemy import delete, func, insert, select, update

from engine import tasks
from engine.jobs.kinds import START
from engine.store import task_counts, writes
from engine.store.db import db
from engine.store.models import Instance, Task, TaskCount
from tests.unit.conftest import deploy_for_new_tenant


def _counted() -> dict:
    return {(t, d, s): n for t, d, s, n in db.session.execute(
        select(TaskCount.tenant_id, TaskCount.definition_id, TaskCount.status, TaskCount.tasks)) if n}


def _exact() -> dict:
    return {(t, d, s): n for t, d, s, n in db.session.execute(
        select(Task.tenant_id, Task.definition_id, Task.status, func.count())
        .group_by(Task.tenant_id, Task.definition_id, Task.status))}


def _task(tenant_id, instance_id, definition_id, status="in_progress") -> dict:
    return {"tenant_id": tenant_id, "instance_id": instance_id, "definition_id": definition_id,
            "spiff_task_id": str(uuid.uuid4()), "element_id": "approve", "name": "Approve", "status": status,
            "form": [], "buttons": [], "variables": {}}


def test_the_counts_follow_every_change_of_the_tasks(app, uow):
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "approval_form.bpmn")
        definition_id = deployed["definition_id"]
        instances = [writes.create_instance(uow, tenant_id, definition_id, {}, START)
                     for _ in range(3)]
        uow.session.add(Task(**_task(tenant_id, instances[0], definition_id)))          # one row
        uow.session.flush()
        uow.session.execute(insert(Task), [_task(tenant_id, instance_id, definition_id)  # many in one statement
                                          for instance_id in instances for _ in range(4)])
        uow.commit()
        assert _counted() == _exact()
        assert task_counts.total(uow, tenant_id) == 13
        assert task_counts.total(uow, tenant_id, status="in_progress", definition_id=definition_id) == 13

        first = uow.session.execute(select(Task.id).where(Task.instance_id == instances[1]).order_by(Task.id)
                                   ).scalars().all()
        uow.session.execute(update(Task).where(Task.id.in_(first[:2])).values(status="completed"))
        uow.session.execute(update(Task).where(Task.id == first[2]).values(status="cancelled"))
        uow.session.execute(update(Task).where(Task.id == first[3]).values(name="renamed"))  # status unchanged
        uow.session.execute(delete(Task).where(Task.id == first[0]))
        uow.commit()
        assert _counted() == _exact()
        assert task_counts.total(uow, tenant_id, status="completed") == 1
        assert task_counts.total(uow, tenant_id, status="cancelled") == 1

        uow.session.execute(delete(Instance).where(Instance.id == instances[0]))  # its tasks go by cascade
        uow.commit()
        assert _counted() == _exact()
        assert task_counts.total(uow, tenant_id) == 7

        listed = tasks.list_tasks(uow, tenant_id, status=None, instance_id=None, definition_id=None, page=1, per_page=5)
        assert listed["total"] == 7 and len(listed["items"]) == 5
        for status in ("in_progress", "completed", "cancelled"):
            listed = tasks.list_tasks(uow, tenant_id, status=status, instance_id=None, definition_id=definition_id,
                                      page=1, per_page=20)
            assert listed["total"] == len(listed["items"]) == _exact().get((tenant_id, definition_id, status), 0)
        uow.rollback()


def test_a_rolled_back_change_leaves_the_counts_as_they_were(app, uow):
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "approval_form.bpmn")
        instance_id = writes.create_instance(uow, tenant_id, deployed["definition_id"], {}, START)
        uow.commit()
        before = _counted()
        uow.session.execute(insert(Task), [_task(tenant_id, instance_id, deployed["definition_id"])])
        uow.rollback()
        assert _counted() == before == _exact()
        uow.rollback()
