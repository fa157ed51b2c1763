"""POST /webhooks/inbound/{webhook_id}, over real HTTP."""
from __future__ import annotations

import concurrent.futures
import hashlib
import hmac
import json

import pytest
import requests

from tests.harness import bpmn


@pytest.fixture
def webhook(api, unique_code):
    deployed = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)
    [route] = deployed["webhooks"]
    return route


def post(url, **kwargs):
    return requests.post(url, timeout=30, **kwargs)


def test_deploy_gives_the_webhook_start_event_a_secret_url(webhook, server):
    assert webhook["start_event_id"] == "paid"
    assert len(webhook["webhook_id"]) >= 22  # 128+ bits, URL-safe
    assert webhook["url"] == f"{server.base_url}/webhooks/inbound/{webhook['webhook_id']}"


def test_json_body_becomes_variables_and_answers_202(webhook, api):
    response = post(webhook["url"], json={"amount": 60, "customer": "Zoë"})
    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"instance_id", "status", "definition_id"} and body["status"] == "running"
    status = api.wait_for(body["instance_id"])
    assert status["status"] == "completed"
    assert status["variables"] == {"total": 120, "label": "big"}


def test_form_body_fields_become_string_variables(webhook, api):
    response = post(webhook["url"], data={"amount": "7", "note": "hi"})
    assert response.status_code == 202
    status = api.wait_for(response.json()["instance_id"])
    assert status["variables"]["amount"] == "7" and status["variables"]["note"] == "hi"
    assert status["variables"]["total"] == 14


def test_empty_body_starts_with_no_variables(api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn").replace(
        '<bpmn:startEvent id="start" />',
        '<bpmn:startEvent id="start"><bpmn:extensionElements><camunda:properties '
        'xmlns:camunda="http://camunda.org/schema/1.0/bpmn"><camunda:property name="trigger" '
        'value="webhook"/></camunda:properties></bpmn:extensionElements></bpmn:startEvent>'), code=unique_code)
    route = api.call("webhook.list", per_page=100)["items"]
    url = next(r["url"] for r in route if r["code"] == unique_code)
    response = post(url, data=b"", headers={"Content-Type": "application/json"})
    assert response.status_code == 202
    status = api.wait_for(response.json()["instance_id"], statuses=("running",))
    assert status["variables"] == {}


def test_redeploy_keeps_the_id_and_starts_the_latest_version(webhook, api, unique_code):
    second = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)
    assert second["webhooks"][0]["webhook_id"] == webhook["webhook_id"]
    response = post(webhook["url"], json={"amount": 1})
    assert response.json()["definition_id"] == second["definition_id"]


@pytest.mark.parametrize("body, content_type", [
    (b"[1, 2]", "application/json"),
    (b'"text"', "application/json"),
    (b"{not json", "application/json"),
    (b"\xff\xfe\x00", "application/json"),
    (b"amount=1", "text/plain"),
])
def test_bad_bodies_get_400_and_start_nothing(webhook, api, body, content_type):
    before = api.call("process.list")["total"]
    response = post(webhook["url"], data=body, headers={"Content-Type": content_type})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_request"
    assert "Traceback" not in response.text
    assert api.call("process.list")["total"] == before


def test_unknown_webhook_is_404_json(server):
    response = post(f"{server.base_url}/webhooks/inbound/nope-not-a-webhook", json={})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_body_over_the_limit_is_413_json(webhook):
    response = post(webhook["url"], data=b"{" + b" " * (1024 * 1024 + 10) + b"}",
                    headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_wrong_method_is_405_json(webhook):
    response = requests.get(webhook["url"], timeout=10)
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_idempotency_key_replays_the_first_answer(webhook, api):
    headers = {"Idempotency-Key": "order-42"}
    first = post(webhook["url"], json={"amount": 1}, headers=headers)
    again = post(webhook["url"], json={"amount": 999}, headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    other = post(webhook["url"], json={"amount": 1}, headers={"Idempotency-Key": "order-43"})
    assert other.json()["instance_id"] != first.json()["instance_id"]


def test_concurrent_calls_with_one_idempotency_key_start_one_instance(webhook):
    def call(_):
        return post(webhook["url"], json={"amount": 1}, headers={"Idempotency-Key": "race-1"}).json()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(call, range(16)))
    assert len({a["instance_id"] for a in answers}) == 1


def test_signature_is_required_once_a_secret_is_set(webhook, api):
    secret = "s3cret-s3cret-s3cret"
    updated = api.call("webhook.update", webhook_id=webhook["webhook_id"], secret=secret)
    assert updated["has_secret"] is True and "secret" not in updated
    body = json.dumps({"amount": 2}).encode()
    good = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json"}

    assert post(webhook["url"], data=body, headers=headers).status_code == 401
    bad = post(webhook["url"], data=body, headers={**headers, "X-Baton-Signature": "sha256=" + "0" * 64})
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "unauthorized"
    tampered = post(webhook["url"], data=body + b" ", headers={**headers, "X-Baton-Signature": good})
    assert tampered.status_code == 401
    assert post(webhook["url"], data=body, headers={**headers, "X-Baton-Signature": good}).status_code == 202


def test_rotate_replaces_the_id_and_the_old_one_is_gone(webhook, api):
    rotated = api.call("webhook.rotate", webhook_id=webhook["webhook_id"])
    assert rotated["webhook_id"] != webhook["webhook_id"]
    assert post(webhook["url"], json={"amount": 1}).status_code == 404
    assert post(rotated["url"], json={"amount": 1}).status_code == 202


def test_other_tenant_cannot_manage_our_webhook(webhook, other_api):
    from tests.harness import RpcError

    for method, params in [("webhook.rotate", {"webhook_id": webhook["webhook_id"]}),
                           ("webhook.update", {"webhook_id": webhook["webhook_id"], "secret": "x" * 20})]:
        with pytest.raises(RpcError) as caught:
            other_api.call(method, **params)
        assert caught.value.reason == "not_found"
    assert webhook["webhook_id"] not in [r["webhook_id"] for r in other_api.call("webhook.list")["items"]]


@pytest.mark.parametrize("body", [b'{"amount": NaN}', b'{"amount": Infinity}', b'{"amount": -Infinity}'])
def test_nan_and_infinity_are_not_json(webhook, body):
    response = post(webhook["url"], data=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "bad_request"


def test_uppercase_hex_signature_is_accepted(webhook, api):
    secret = "another-secret-value"
    api.call("webhook.update", webhook_id=webhook["webhook_id"], secret=secret)
    body = b'{"amount": 5}'
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().upper()
    response = post(webhook["url"], data=body, headers={"Content-Type": "application/json",
                                                        "X-Baton-Signature": signature})
    assert response.status_code == 202


def test_idempotency_key_too_long_is_bad_request(webhook):
    response = post(webhook["url"], json={"amount": 1}, headers={"Idempotency-Key": "k" * 256})
    assert response.status_code == 400 and response.json()["error"]["code"] == "bad_request"


def test_plain_json_start_answers_exactly_as_the_full_path(webhook, api):
    """A plain JSON start is served by the lean accept path (channels.webhook.LeanWebhookStart); a
    +json content type by Flask's. Same status, headers that matter, body bytes shape and effect."""
    body = json.dumps({"amount": 60}).encode()
    lean = post(webhook["url"], data=body, headers={"Content-Type": "application/json"})
    full = post(webhook["url"], data=body, headers={"Content-Type": "application/vnd.order+json"})
    assert lean.status_code == full.status_code == 202
    assert lean.headers["Content-Type"] == full.headers["Content-Type"] == "application/json"
    assert lean.text.endswith("}\n") and full.text.endswith("}\n")
    assert list(lean.json()) == list(full.json()) == ["instance_id", "status", "definition_id"]
    assert lean.json()["definition_id"] == full.json()["definition_id"]
    assert full.json()["instance_id"] == lean.json()["instance_id"] + 1
    assert len(lean.content) == len(full.content)
    for answer in (lean, full):
        status = api.wait_for(answer.json()["instance_id"])
        assert status["status"] == "completed" and status["variables"] == {"total": 120, "label": "big"}


@pytest.mark.parametrize("headers", [
    {"Content-Type": "application/json; charset=utf-8"},
    {"Content-Type": "APPLICATION/JSON"},
])
def test_json_content_type_variants_start(webhook, api, headers):
    response = post(webhook["url"], data=b'{"amount": 60}', headers=headers)
    assert response.status_code == 202
    assert api.wait_for(response.json()["instance_id"])["status"] == "completed"


def test_chunked_json_body_starts_too(webhook, api):
    response = post(webhook["url"], data=iter([b'{"amount"', b': 60}']),
                    headers={"Content-Type": "application/json"})
    assert response.status_code == 202
    assert api.wait_for(response.json()["instance_id"])["status"] == "completed"


def test_secret_set_after_plain_starts_is_enforced_at_once(webhook, api):
    assert post(webhook["url"], json={"amount": 1}).status_code == 202
    api.call("webhook.update", webhook_id=webhook["webhook_id"], secret="s" * 20)
    response = post(webhook["url"], json={"amount": 1})
    assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"
    api.call("webhook.update", webhook_id=webhook["webhook_id"], secret=None)
    assert post(webhook["url"], json={"amount": 1}).status_code == 202
