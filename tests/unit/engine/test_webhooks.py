"""``engine.webhooks.accept``: the one accept of a webhook call, whichever door it came through (run
in the unit of work the doors own, ``channels.webhook.accept``: committed, or rolled back when
the call is refused)."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from channels import webhook as webhook_door
from engine import webhooks
from engine.errors import BadRequestError, NotFoundError, UnauthorizedError
from engine.store.db import db
from engine.store.models import Instance, Job
from tests.unit.conftest import deploy_for_new_tenant


@pytest.fixture
def route(app, uow):
    with app.app_context():
        tenant_id, deployed = deploy_for_new_tenant(uow, "webhook_order.bpmn")
        uow.rollback()
        yield tenant_id, deployed["definition_id"], deployed["webhooks"][0]["webhook_id"]
        uow.rollback()
        db.session.remove()


def _accept(app, webhook_id: str, variables, **headers):
    call = webhooks.WebhookCall(webhook_id, b"{}", variables, **headers)
    return webhook_door.accept(app.extensions["baton.units"], call)


def _count() -> int:
    count = db.session.execute(select(func.count()).select_from(Instance)).scalar_one()
    db.session.rollback()
    return count


def test_a_call_starts_the_latest_version_with_its_start_job(app, route, uow):
    tenant_id, definition_id, webhook_id = route
    answer = _accept(app, webhook_id, {"amount": 5})
    assert answer == {"instance_id": answer["instance_id"], "status": "running", "definition_id": definition_id}
    job = uow.session.execute(select(Job).where(Job.instance_id == answer["instance_id"])).scalar_one()
    assert (job.kind, job.payload, job.tenant_id) == ("start", {"variables": {"amount": 5}, "start_event": "paid"},
                                                      tenant_id)
    uow.rollback()


def test_an_unknown_route_is_not_found_whatever_the_body_and_writes_nothing(app, route):
    before = _count()
    for webhook_id in ("no-such-webhook", "x" * 500, "a\x00b"):
        with pytest.raises(NotFoundError):
            _accept(app, webhook_id, BadRequestError("bad body"))
    assert _count() == before


def test_a_bad_body_is_refused_after_the_route_is_found(app, route):
    _tenant_id, _definition_id, webhook_id = route
    before = _count()
    with pytest.raises(BadRequestError, match="bad body"):
        _accept(app, webhook_id, BadRequestError("bad body"))
    assert _count() == before


def test_a_route_with_a_secret_needs_the_signature_of_the_body(app, route, uow):
    tenant_id, _definition_id, webhook_id = route
    webhooks.set_secret(uow, tenant_id, webhook_id, "s" * 20, "http://x")
    uow.commit()
    before = _count()
    with pytest.raises(UnauthorizedError):
        _accept(app, webhook_id, {}, signature="sha256=00")
    assert _count() == before
    answer = _accept(app, webhook_id, {}, signature=webhooks.signature_of("s" * 20, b"{}"))
    assert answer["status"] == "running"


def test_an_idempotency_key_replays_the_first_answer_and_starts_nothing_new(app, route):
    _tenant_id, _definition_id, webhook_id = route
    first = _accept(app, webhook_id, {"n": 1}, idempotency_key="order-17")
    before = _count()
    again = _accept(app, webhook_id, {"n": 2}, idempotency_key="order-17")
    assert again == first and _count() == before
    with pytest.raises(BadRequestError, match="Idempotency-Key"):
        _accept(app, webhook_id, {}, idempotency_key="k" * 256)
