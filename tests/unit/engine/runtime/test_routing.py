"""engine.runtime.routing and .subscriptions on a real database, the test playing the worker: an
advance writes the subscriptions of what its instance waits for; a message reaches the instances
its correlation matches, claims the waiting element once, refuses to pick one of several; the
matching rule itself."""
from __future__ import annotations

import pytest
from sqlalchemy import select

from app import advance_contributors
from engine import instances
from engine.errors import ConflictError
from engine.jobs import kinds
from engine.runtime import routing, subscription_rows as subscriptions
from engine.jobs.worker import run_job
from engine.runtime.runner import Runner
from engine.store.db import db
from engine.store.models import EventSubscription, Job
from engine.store.workflows import SpecCache
from tests.unit.conftest import deploy_for_new_tenant, claim

WORKER = "unit-worker"


@pytest.fixture
def waiting(app, script_engine, uow):
    """A tenant and two instances of cov_message_catch waiting for 'payment_received'."""
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "cov_message_catch.bpmn")
        definition = instances.resolve_definition(uow, tenant_id, deployed["definition_id"])
        ids = [instances.start(uow, tenant_id, definition, {"customer": name, "due": 10})["instance_id"]
               for name in ("ann", "bob")]
        runner = Runner(script_engine, SpecCache(), advance_contributors("http://127.0.0.1"))
        for job in claim(uow, WORKER, 30, limit=2):
            run_job(app.extensions["baton.units"], runner, job, WORKER)
        yield tenant_id, ids
        uow.rollback()
        db.session.remove()


def test_an_advance_writes_the_subscriptions_of_what_its_instance_waits_for(waiting):
    tenant_id, ids = waiting
    rows = db.session.execute(select(EventSubscription.instance_id, EventSubscription.kind, EventSubscription.name,
                                     EventSubscription.element_id)
                              .where(EventSubscription.tenant_id == tenant_id)).all()
    assert sorted(rows) == [(i, "message", "payment_received", "paid") for i in ids]


def test_a_message_reaches_the_instance_its_correlation_matches_and_claims_its_element_once(waiting, uow):
    tenant_id, (ann, bob) = waiting
    result = routing.deliver(uow, tenant_id, "message", "payment_received", {"amount": 4}, {"customer": "bob"})
    assert result == {"reached": [bob], "started": []}
    [job] = uow.session.execute(select(Job).where(Job.instance_id == bob, Job.kind == kinds.MESSAGE)).scalars()
    assert job.payload == {"message": "payment_received", "variables": {"amount": 4}, "correlation": {"customer": "bob"}}
    again = routing.deliver(uow, tenant_id, "message", "payment_received", {}, {"customer": "bob"})
    assert again == {"reached": [], "started": []}  # its element is taken by the first
    with pytest.raises(ConflictError) as several:
        routing.deliver(uow, tenant_id, "message", "payment_received", {}, {}, single=True)
    assert "matches 2 waiting instances" in several.value.message  # bob's subscription stands until applied
    assert routing.deliver(uow, tenant_id, "message", "payment_received", {}, {})["reached"] == [ann]
    assert routing.deliver(uow, tenant_id + 10_000, "message", "payment_received", {}, {})["reached"] == []


@pytest.mark.parametrize("correlation, awaited, variables, expected", [
    ({}, {}, {}, True),
    ({"order_id": 7}, {"order_id": 7}, {}, True),
    ({"order_id": 7}, {"order_id": 8}, {"order_id": 7}, False),   # the correlation property wins
    ({"order_id": 7}, {}, {"order_id": 7}, True),                  # else the variable
    ({"order_id": 7}, {}, {}, False),                               # neither: no match
    ({"a": 1, "b": 2}, {"a": 1}, {"b": 3}, False),
])
def test_the_matching_rule(correlation, awaited, variables, expected):
    assert routing.matches(correlation, awaited, variables) is expected


def test_subscriptions_change_only_with_the_messages_and_signals_waited_for():
    before = [{"element_id": "paid", "kind": "intermediateCatchEvent", "message": "m", "correlation": {"k": 1}},
              {"element_id": "review", "kind": "userTask"}]
    queued = [{**before[0], routing.QUEUED: True}, {"element_id": "other", "kind": "userTask"}]
    assert not subscriptions.changed(before, queued)
    assert subscriptions.changed(before, [{**before[0], "correlation": {"k": 2}}])
    gateway = [{"element_id": "g", "kind": "eventBasedGateway", "message": "a", "messages": ["a", "b"],
                "signal": "s"}]
    assert {(kind, name) for kind, name, _, _ in subscriptions.of(gateway)} == {("message", "a"), ("message", "b"),
                                                                              ("signal", "s")}
