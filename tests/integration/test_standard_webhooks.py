"""Standard Webhooks (issue 29, INTERFACE §5.10) through the real server, SQLite and PostgreSQL: our
outbound deliveries verify with the reference library ``standardwebhooks`` (a test dependency), for a
plain secret and a ``whsec_`` one; an inbound webhook with a secret accepts that form, and refuses a
replayed id, a stale timestamp and malformed headers with a 401 JSON error, starting nothing."""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import requests
from standardwebhooks import Webhook

from tests.harness import bpmn

BODY = b'{"amount": 70}'


def whsec() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def received_for(receiver, api, server, secret: str):
    """A customer message on a web-chat channel signed with ``secret``; the answer as received."""
    channel = api.call("channel.create", type="webchat", name=f"sw-{uuid.uuid4().hex[:8]}",
                       webhook_url=receiver.url + "/chat", webhook_secret=secret)
    api.deploy(bpmn("chat_reply.bpmn").replace("__CHANNEL__", str(channel["config_id"])),
               code=f"sw-{uuid.uuid4().hex[:8]}")
    key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    answer = requests.post(f"{server.base_url}/channels/webchat/{channel['config_id']}/inbound",
                           json={"chat_id": "c-1", "text": "hi"}, headers={"X-API-Key": key}, timeout=10)
    assert answer.status_code == 202, answer.text
    [got] = receiver.wait_for(1, timeout=30)
    return got


@pytest.mark.parametrize("kind", ["plain", "whsec"])
def test_outbound_deliveries_verify_with_the_reference_library(api, server, receiver, kind):
    secret = "plain-secret-" + uuid.uuid4().hex if kind == "plain" else whsec()
    got = received_for(receiver, api, server, secret)
    headers = {name.lower(): value for name, value in got.headers.items()}
    assert headers["webhook-id"] == headers["x-baton-delivery"]
    assert headers["webhook-timestamp"] == headers["x-baton-timestamp"]
    assert headers["webhook-signature"].startswith("v1,")
    # The reference verifier: a whsec_ secret as the standard reads it, any other as its bytes.
    verifier = Webhook(secret) if kind == "whsec" else Webhook(secret.encode())
    assert verifier.verify(got.body, headers) == got.json()
    # Beside it, Baton's own signature is unchanged: the HMAC of the body with the secret's characters.
    assert headers["x-baton-signature"] == "sha256=" + hmac.new(secret.encode(), got.body, hashlib.sha256).hexdigest()
    with pytest.raises(Exception):  # noqa: B017 - the library's own WebhookVerificationError
        verifier.verify(got.body + b" ", headers)


@pytest.fixture
def signed_hook(api, unique_code):
    """A webhook start with a ``whsec_`` secret: its URL and the reference signer."""
    webhook = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)["webhooks"][0]
    secret = whsec()
    api.call("webhook.update", webhook_id=webhook["webhook_id"], secret=secret)
    return webhook["url"], Webhook(secret)


def post(url: str, message_id, timestamp, signature) -> requests.Response:
    headers = {"Content-Type": "application/json"}
    for name, value in (("webhook-id", message_id), ("webhook-timestamp", timestamp),
                        ("webhook-signature", signature)):
        if value is not None:
            headers[name] = value
    return requests.post(url, data=BODY, headers=headers, timeout=10)


def started(api) -> int:
    return api.call("process.list", per_page=1)["total"]


def test_an_inbound_webhook_accepts_the_standard_form_once(api, signed_hook):
    url, signer = signed_hook
    message_id, now = "msg_" + uuid.uuid4().hex, datetime.now(timezone.utc)
    signature = signer.sign(message_id, now, BODY.decode())
    first = post(url, message_id, str(int(now.timestamp())), signature)
    assert first.status_code == 202, first.text
    assert api.wait_for(first.json()["instance_id"])["status"] == "completed"
    before = started(api)
    replayed = post(url, message_id, str(int(now.timestamp())), signature)
    assert replayed.status_code == 401 and replayed.headers["Content-Type"].startswith("application/json")
    assert replayed.json()["error"]["code"] == "unauthorized" and "seen before" in replayed.json()["error"]["message"]
    assert started(api) == before
    # Another id, freshly signed, is a new call.
    other = "msg_" + uuid.uuid4().hex
    assert post(url, other, str(int(now.timestamp())), signer.sign(other, now, BODY.decode())).status_code == 202


def _bad_calls(signer):
    now = datetime.now(timezone.utc)
    stale = now - timedelta(minutes=6)
    future = now + timedelta(minutes=6)
    good_id = "msg_" + uuid.uuid4().hex
    return {
        "stale timestamp": ("msg_stale", str(int(stale.timestamp())), signer.sign("msg_stale", stale, BODY.decode())),
        "future timestamp": ("msg_fut", str(int(future.timestamp())), signer.sign("msg_fut", future, BODY.decode())),
        "bad base64": (good_id, str(int(now.timestamp())), "v1,@@not base64@@"),
        "empty webhook-id": ("", str(int(now.timestamp())), signer.sign("x", now, BODY.decode())),
        "non-numeric timestamp": (good_id, "soon", signer.sign(good_id, now, BODY.decode())),
        "missing signature": (good_id, str(int(now.timestamp())), None),
        "wrong signature": (good_id, str(int(now.timestamp())),
                            "v1," + base64.b64encode(b"x" * 32).decode()),
        "signed for another body": (good_id, str(int(now.timestamp())),
                                    Webhook(whsec()).sign(good_id, now, BODY.decode())),
    }


def test_malformed_or_stale_standard_headers_are_401_json_and_start_nothing(api, signed_hook):
    url, signer = signed_hook
    before = started(api)
    for case, (message_id, timestamp, signature) in _bad_calls(signer).items():
        answer = post(url, message_id, timestamp, signature)
        assert answer.status_code == 401, (case, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "unauthorized" and error["message"], case
    assert started(api) == before
    # A refused id was not remembered: the same id, well signed, is accepted.
    now = datetime.now(timezone.utc)
    message_id = "msg_" + uuid.uuid4().hex
    assert post(url, message_id, "x", signer.sign(message_id, now, BODY.decode())).status_code == 401
    assert post(url, message_id, str(int(now.timestamp())),
                signer.sign(message_id, now, BODY.decode())).status_code == 202


def test_the_x_baton_signature_still_works_and_a_webhook_without_secret_ignores_the_headers(api, unique_code):
    webhook = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)["webhooks"][0]
    assert post(webhook["url"], "", "soon", "v1,@@").status_code == 202  # no secret: nothing is checked
    secret = "plain-secret-" + uuid.uuid4().hex
    api.call("webhook.update", webhook_id=webhook["webhook_id"], secret=secret)
    signature = "sha256=" + hmac.new(secret.encode(), BODY, hashlib.sha256).hexdigest()
    assert requests.post(webhook["url"], data=BODY, headers={"Content-Type": "application/json",
                                                             "X-Baton-Signature": signature},
                         timeout=10).status_code == 202
    # A plain secret signs the standard form with its characters, as outbound deliveries do.
    message_id, now = "msg_" + uuid.uuid4().hex, datetime.now(timezone.utc)
    assert post(webhook["url"], message_id, str(int(time.time())),
                Webhook(secret.encode()).sign(message_id, now, BODY.decode())).status_code == 202


def test_a_crm_task_event_verifies_with_the_reference_library_under_its_callback_token(api, unique_code, receiver):
    from tests.integration.test_headless_tasks import _BUTTONS

    xml = bpmn("approval_form.bpmn").replace(
        _BUTTONS, _BUTTONS + f'<camunda:property name="crm_webhook" value="{receiver.url}/crm/events" />')
    api.deploy(xml, code=unique_code)
    api.call("process.start", definition_id=unique_code, variables={"customer": "Zoë", "order": 17})
    [got] = receiver.wait_for(1, timeout=30)
    headers = {name.lower(): value for name, value in got.headers.items()}
    event = Webhook(got.json()["callback_token"].encode()).verify(got.body, headers)
    assert event["event"] == "task.created" and headers["webhook-id"] == headers["x-baton-delivery"]
