"""Deliveries through the real server (SQLite and PostgreSQL): its worker pool sends them, and
``delivery.list`` / ``delivery.retry`` answer over HTTP.

The rows are made the way the conversation code makes them, with ``engine.delivery.queue``, from
an app in this process on the server's own database (no worker threads here: the server's workers
claim and send them). The web-chat end-to-end test (a customer message answered through the
channel's webhook) lives with the web-chat tests.
"""
from __future__ import annotations

import hashlib
import hmac
import time
import uuid

import pytest
from sqlalchemy import select

from app import create_app
from engine import auth
from engine.outbound import delivery
from engine.store.db import db, utcnow
from engine.store.models import Channel
from tests.harness import RpcError, unit_of_work_of
from tests.receiver import Answer

ITEM_KEYS = {"delivery_id", "delivery_uid", "channel_id", "event", "url", "status", "attempts", "last_status",
             "last_error", "created_at", "next_attempt_at", "sent_at", "external_id", "receipt"}


@pytest.fixture(scope="module")
def local(database_url):
    """An app on the server's database, for writing rows; it runs no workers."""
    app = create_app({"database_url": database_url, "workers": 0, "allow_private_urls": "1"})
    yield app
    with app.app_context():
        db.engine.dispose()


@pytest.fixture
def uow(local):
    unit = unit_of_work_of(local)
    yield unit
    unit.rollback()


@pytest.fixture
def tenant_id(local, admin_key, uow) -> int:
    with local.app_context():
        return auth.authenticate(uow, admin_key).tenant_id


def queue(uow, local, tenant_id: int, url: str, text: str, *, secret: str | None = None,
          channel_id: int | None = None) -> int:
    with local.app_context():
        row = delivery.queue(uow, tenant_id, url=url, payload=delivery.message_payload("c-1", text, utcnow()),
                             secret=secret, ordering_key=f"it:{uuid.uuid4().hex[:8]}", channel_id=channel_id)
        delivery_id = row.id
        uow.commit()
        return delivery_id


def listed(api, delivery_id: int, **params) -> dict | None:
    page = api.call("delivery.list", per_page=100, **params)
    return next((item for item in page["items"] if item["delivery_id"] == delivery_id), None)


def wait_listed(api, delivery_id: int, status: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        item = listed(api, delivery_id)
        if item is not None and item["status"] == status:
            return item
        assert time.monotonic() < deadline, f"delivery {delivery_id} is {item and item['status']}, not {status}"
        time.sleep(0.05)


def header(received, name: str) -> str | None:
    return next((v for k, v in received.headers.items() if k.lower() == name.lower()), None)


def test_the_servers_workers_send_it_and_delivery_list_shows_it(api, local, tenant_id, receiver, uow):
    delivery_id = queue(uow, local, tenant_id, receiver.url + "/chat", "Hello Zoë!", secret="list-secret")
    [got] = receiver.wait_for(1, timeout=30)
    item = wait_listed(api, delivery_id, "sent")
    assert set(item) == ITEM_KEYS                       # no body, no secret
    assert got.json()["text"] == "Hello Zoë!"
    assert header(got, "X-Baton-Delivery") == item["delivery_uid"]
    assert header(got, "X-Baton-Signature") == "sha256=" + hmac.new(b"list-secret", got.body,
                                                                    hashlib.sha256).hexdigest()
    assert item == {**item, "channel_id": None, "event": "message", "url": receiver.url + "/chat",
                    "attempts": 1, "last_status": 200, "last_error": None, "next_attempt_at": None}
    assert item["created_at"].endswith("Z") and item["sent_at"].endswith("Z")
    assert listed(api, delivery_id, status="sent") == item
    assert listed(api, delivery_id, status="dead") is None and listed(api, delivery_id, status="queued") is None
    # Newest first, paged.
    newer = queue(uow, local, tenant_id, receiver.url, "second")
    first_page = api.call("delivery.list", per_page=1)
    assert first_page["items"][0]["delivery_id"] == newer and first_page["per_page"] == 1
    assert first_page["total"] >= 2 and api.call("delivery.list", per_page=1, page=2)["items"][0]["delivery_id"] < newer


def test_a_dead_delivery_is_listed_and_resent_by_delivery_retry(api, local, tenant_id, receiver, uow):
    with local.app_context():
        channel = Channel(tenant_id=tenant_id, type="webchat", name=f"dl-{uuid.uuid4().hex[:8]}",
                          webhook_url="http://127.0.0.1:0/hook", webhook_secret="chan-secret", settings={})
        uow.session.add(channel)
        uow.commit()
        channel_id = channel.id
    delivery_id = queue(uow, local, tenant_id, "http://127.0.0.1:0/hook", "are you there?", secret="chan-secret",
                        channel_id=channel_id)
    dead = wait_listed(api, delivery_id, "dead")           # port 0: the URL check refuses it at once
    assert dead["attempts"] == 1 and dead["channel_id"] == channel_id
    assert "not allowed" in dead["last_error"] and "port" in dead["last_error"]
    assert listed(api, delivery_id, status="dead") == dead
    with local.app_context():                              # the admin fixes the channel's URL ...
        uow.session.execute(select(Channel).where(Channel.id == channel_id)).scalar_one().webhook_url = receiver.url
        uow.commit()
    assert api.call("delivery.retry", delivery_id=delivery_id) == {"delivery_id": delivery_id, "status": "queued"}
    [got] = receiver.wait_for(1, timeout=30)               # ... and re-sends it: same uid, still signed
    assert header(got, "X-Baton-Delivery") == dead["delivery_uid"]
    assert header(got, "X-Baton-Signature") == "sha256=" + hmac.new(b"chan-secret", got.body,
                                                                    hashlib.sha256).hexdigest()
    sent = wait_listed(api, delivery_id, "sent")
    assert (sent["attempts"], sent["url"], sent["last_error"]) == (2, receiver.url, None)
    with pytest.raises(RpcError) as refused:
        api.call("delivery.retry", delivery_id=delivery_id)
    assert refused.value.reason == "conflict"


def test_a_delivery_that_failed_and_waits_to_be_retried_is_listed_as_failing(api, local, tenant_id, receiver, uow):
    receiver.default = Answer(503)
    delivery_id = queue(uow, local, tenant_id, receiver.url, "not yet")
    receiver.wait_for(1, timeout=30)
    deadline = time.monotonic() + 30
    while (listed(api, delivery_id) or {}).get("attempts", 0) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    failing = listed(api, delivery_id, failing=True)
    assert failing["status"] == "queued" and failing["last_status"] == 503 and failing["next_attempt_at"]
    assert listed(api, delivery_id, status="dead") is None  # failing is not dead: it is retried
    with pytest.raises(RpcError) as refused:
        api.call("delivery.list", failing="yes")
    assert refused.value.reason == "invalid_params" and refused.value.data["param"] == "failing"


def test_delivery_methods_need_admin_and_stay_in_the_tenant(server, api, other_api, local, tenant_id, receiver, uow):
    delivery_id = queue(uow, local, tenant_id, receiver.url, "mine")
    with pytest.raises(RpcError) as not_theirs:
        other_api.call("delivery.retry", delivery_id=delivery_id)
    assert not_theirs.value.reason == "not_found"
    assert listed(other_api, delivery_id) is None
    operator = server.api(api.call("apikey.create", name="operator", permissions=["process.*", "task.*"])["api_key"])
    for method, params in (("delivery.list", {}), ("delivery.retry", {"delivery_id": delivery_id})):
        with pytest.raises(RpcError) as forbidden:
            operator.call(method, **params)
        assert (forbidden.value.reason, forbidden.value.data["permission"]) == ("forbidden", "admin")
    for method, params in (("delivery.list", {"status": "lost"}), ("delivery.list", {"per_page": 101}),
                           ("delivery.list", {"secret": True}), ("delivery.retry", {}),
                           ("delivery.retry", {"delivery_id": "1"})):
        with pytest.raises(RpcError) as invalid:
            api.call(method, **params)
        assert invalid.value.reason == "invalid_params", (method, params)
    with pytest.raises(RpcError) as unknown:
        api.call("delivery.retry", delivery_id=2**62)
    assert unknown.value.reason == "not_found"
