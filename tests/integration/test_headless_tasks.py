"""Headless user tasks: the signed task.created event and the callback endpoint.

A real receiver (``tests/receiver.Receiver``) plays the CRM; the server allows private URLs.
"""
from __future__ import annotations

import hashlib
import hmac

import pytest
import requests

from tests.harness import bpmn
from tests.integration.test_tasks import open_task
from tests.receiver import Receiver

_BUTTONS = '<camunda:property name="buttons" value="approve,reject" />'


@pytest.fixture
def crm():
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture
def headless(api, unique_code, crm):
    """A started instance whose userTask has ``crm_webhook``: (instance_id, task, event request)."""
    xml = bpmn("approval_form.bpmn").replace(
        _BUTTONS, _BUTTONS + f'<camunda:property name="crm_webhook" value="{crm.url}/crm/events" />')
    api.deploy(xml, code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code,
                           variables={"customer": "Zoë", "order": 17})["instance_id"]
    task = open_task(api, instance_id)
    received = crm.wait_for(1)[0]
    return instance_id, task, received


def callback(server, task_id, token, body, **headers):
    if token is not None:
        headers["X-Callback-Token"] = token
    return requests.post(f"{server.base_url}/tasks/{task_id}/callback", json=body, headers=headers, timeout=10)


def test_task_created_event_has_every_field_and_a_valid_signature(server, headless):
    instance_id, task, received = headless
    assert received.method == "POST" and received.path == "/crm/events"
    event = received.json()
    assert list(event) == ["event", "task_id", "instance_id", "name", "form", "buttons", "variables",
                           "callback_url", "callback_token"]
    assert event["event"] == "task.created"
    assert event["task_id"] == task["task_id"] and event["instance_id"] == instance_id
    assert event["name"] == "Approve the refund" and event["buttons"] == ["approve", "reject"]
    assert event["form"] == task["form"] and event["variables"] == {"customer": "Zoë", "order": 17}
    assert event["callback_url"] == f"{server.base_url}/tasks/{task['task_id']}/callback"
    token = event["callback_token"]
    assert isinstance(token, str) and len(token) >= 43
    expected = "sha256=" + hmac.new(token.encode(), received.body, hashlib.sha256).hexdigest()
    assert received.headers["X-Baton-Signature"] == expected
    assert received.headers["X-Baton-Delivery"] and received.headers["X-Baton-Timestamp"].isdigit()
    assert "callback_token" not in task  # task.list never shows the token


def test_callback_completes_the_task_and_the_instance_continues(api, server, headless):
    instance_id, task, received = headless
    event = received.json()
    answer = requests.post(event["callback_url"], headers={"X-Callback-Token": event["callback_token"]},
                           json={"result": {"response": "Refunded", "decision": "approve"}}, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"task_id": task["task_id"], "status": "completed", "instance_id": instance_id}
    status = api.wait_for(instance_id)
    assert status["status"] == "completed"
    assert status["variables"]["response"] == "Refunded" and status["variables"]["amount"] == 10
    done = api.call("task.list", instance_id=instance_id, status="completed")["items"]
    assert done[0]["result"]["decision"] == "approve"


def test_wrong_or_missing_token_is_401_and_changes_nothing(api, server, headless):
    instance_id, task, received = headless
    good = {"result": {"response": "x", "decision": "reject"}}
    real = received.json()["callback_token"]
    altered = real[:-1] + ("B" if real[-1] == "A" else "A")  # one character off, never the token itself
    for token in (None, "", "not-the-token", altered, real + "x"):
        answer = callback(server, task["task_id"], token, good)
        assert answer.status_code == 401, (token, answer.text)
        assert answer.json()["error"]["code"] == "unauthorized"
    still = api.call("task.list", instance_id=instance_id)["items"]
    assert [t["status"] for t in still] == ["in_progress"]
    assert api.call("process.status", instance_id=instance_id)["status"] == "running"


def test_unknown_task_is_404(server, headless):
    _, task, received = headless
    answer = callback(server, task["task_id"] + 10_000_000, received.json()["callback_token"], {"result": {}})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


def test_second_callback_is_a_conflict(api, server, headless):
    instance_id, task, received = headless
    token = received.json()["callback_token"]
    first = callback(server, task["task_id"], token, {"result": {"response": "ok", "decision": "approve"}})
    assert first.status_code == 200, first.text
    second = callback(server, task["task_id"], token, {"result": {"response": "ok", "decision": "reject"}})
    assert second.status_code == 409 and second.json()["error"]["code"] == "conflict"
    assert api.wait_for(instance_id)["status"] == "completed"


@pytest.mark.parametrize("body, field", [
    ({"result": {"response": "ok"}}, "decision"),
    ({"result": {"response": 5, "decision": "approve"}}, "response"),
    ({"result": {"response": "ok", "decision": "approve", "reason": "bored"}}, "reason"),
    ({"result": ["approve"]}, "result"),
    ({"outcome": {}}, "outcome"),
])
def test_bad_result_is_400_naming_the_field(api, server, headless, body, field):
    instance_id, task, received = headless
    answer = callback(server, task["task_id"], received.json()["callback_token"], body)
    assert answer.status_code == 400, answer.text
    assert f"'{field}'" in answer.json()["error"]["message"]
    assert [t["status"] for t in api.call("task.list", instance_id=instance_id)["items"]] == ["in_progress"]


def test_task_complete_also_completes_a_headless_task(api, server, headless):
    instance_id, task, received = headless
    api.call("task.complete", task_id=task["task_id"], result={"response": "Done", "decision": "approve"})
    assert api.wait_for(instance_id)["status"] == "completed"
    late = callback(server, task["task_id"], received.json()["callback_token"],
                    {"result": {"response": "late", "decision": "reject"}})
    assert late.status_code == 409


def test_a_task_without_crm_webhook_sends_nothing_and_refuses_callbacks(api, server, unique_code, crm):
    api.deploy(bpmn("approval_form.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={})["instance_id"]
    task = open_task(api, instance_id)
    answer = callback(server, task["task_id"], "anything", {"result": {"response": "x", "decision": "approve"}})
    assert answer.status_code == 401
    assert crm.requests == []
