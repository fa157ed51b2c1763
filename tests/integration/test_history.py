"""process.history over real HTTP: every kind of event of contract §5.7 recorded with its actor,
in the transaction of what it records; an incident stays after its retry; oldest first, paged;
tenants see only their own."""
from __future__ import annotations

import time
import uuid

import pytest
import requests

from tests.harness import RpcError, bpmn
from tests.integration.test_operator_work import open_tasks, operator
from tests.integration.test_webchat import accepted, create_channel, deploy_chat, eventually

SYSTEM = {"type": "system", "name": "baton"}


def history(api, instance_id: int, **params) -> list[dict]:
    return api.call("process.history", instance_id=instance_id, per_page=100, **params)["items"]


def kinds(api, instance_id: int) -> list[str]:
    return [event["kind"] for event in history(api, instance_id)]


def key(server, api, name: str, permissions=("process.*", "task.*")):
    return server.api(api.call("apikey.create", name=name, permissions=list(permissions))["api_key"])


def test_a_failure_stays_in_the_history_after_its_retry_beside_the_retried_event(server, api, unique_code):
    ops = key(server, api, f"ops-{uuid.uuid4().hex[:6]}")
    api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    instance_id = ops.call("process.start", definition_id=unique_code, variables={"divisor": 0})["instance_id"]
    failed = api.wait_for(instance_id)
    assert failed["status"] == "failed"
    ops.call("process.retry", instance_id=instance_id, variables={"divisor": 4})
    assert api.wait_for(instance_id)["status"] == "completed"

    events = history(api, instance_id)
    assert [e["kind"] for e in events] == ["started", "failed", "retried", "completed"]
    started, incident, retried, completed = events
    assert started["actor"] == {"type": "api_key", "name": ops.call("auth.whoami")["name"]}
    assert incident["actor"] == SYSTEM and incident["element_id"] == "divide"
    assert incident["detail"]["message"] == failed["error"]["message"] and "division" in incident["detail"]["message"]
    assert retried["actor"] == started["actor"] and retried["element_id"] == "divide"
    assert retried["detail"] == {"set": ["divisor"]}
    assert completed["actor"] == SYSTEM
    assert [e["event_id"] for e in events] == sorted(e["event_id"] for e in events)
    assert all(e["at"].endswith("Z") for e in events) and events[0]["at"] <= events[-1]["at"]


def test_a_second_failure_after_a_retry_is_a_second_incident(api, unique_code):
    api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"divisor": 0})["instance_id"]
    api.wait_for(instance_id)
    api.call("process.retry", instance_id=instance_id)
    api.wait_for(instance_id)
    assert kinds(api, instance_id) == ["started", "failed", "retried", "failed"]


def test_a_webhook_start_names_the_webhook_and_the_end_the_system(server, api, unique_code):
    webhook = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)["webhooks"][0]
    response = requests.post(webhook["url"], json={"amount": 60}, timeout=30)
    assert response.status_code == 202
    instance_id = response.json()["instance_id"]
    assert api.wait_for(instance_id)["status"] == "completed"
    events = history(api, instance_id)
    assert [e["kind"] for e in events] == ["started", "completed"]
    assert events[0]["actor"] == {"type": "webhook", "name": webhook["webhook_id"][:8]}
    assert events[0]["detail"] == {} and events[1]["actor"] == SYSTEM


def test_messages_tasks_claims_and_cancel_are_recorded_with_who_did_them(server, api, unique_code):
    api.deploy(bpmn("cov_message_catch.bpmn"), code=unique_code)
    sender = key(server, api, f"payments-{uuid.uuid4().hex[:6]}")
    waiting = api.call("process.start", definition_id=unique_code, variables={"due": 10})["instance_id"]
    api.wait_for(waiting, statuses=("running",))
    eventually(lambda: api.call("process.status", instance_id=waiting)["waiting_for"], bool)
    sender.call("process.message", instance_id=waiting, message="payment_received", variables={"amount": 4})
    assert api.wait_for(waiting)["status"] == "completed"
    events = history(api, waiting)
    assert [e["kind"] for e in events] == ["started", "message_received", "completed"]
    assert events[1]["element_id"] == "paid" and events[1]["detail"] == {"message": "payment_received"}
    assert events[1]["actor"]["name"] == sender.call("auth.whoami")["name"]

    review = unique_code + "-review"
    api.deploy(bpmn("assigned_review.bpmn"), code=review)
    user = f"ann-{uuid.uuid4().hex[:4]}"
    ann = operator(server, api, user, permissions=("task.list", "task.claim", "task.complete", "process.history"))
    instance_id = api.call("process.start", definition_id=review, variables={})["instance_id"]
    [task] = open_tasks(api, instance_id)
    api.call("task.assign", task_id=task["task_id"], user="bob")
    api.call("task.assign", task_id=task["task_id"], user=None)
    ann.call("task.claim", task_id=task["task_id"])
    ann.call("task.complete", task_id=task["task_id"], result={})
    api.wait_for(instance_id, statuses=("completed", "running", "failed"))
    events = [e for e in history(api, instance_id) if e["kind"].startswith("task_")]
    assert [(e["kind"], e["detail"]["assignee"] if "assignee" in e["detail"] else "-") for e in events] == [
        ("task_assigned", "bob"), ("task_assigned", None), ("task_claimed", user), ("task_completed", "-")]
    assert all(e["element_id"] == task["element_id"] and e["detail"]["task_id"] == task["task_id"] for e in events)
    assert events[2]["actor"]["name"] == events[3]["actor"]["name"] == f"key of {user}"

    cancelled = api.call("process.start", definition_id=review, variables={})["instance_id"]
    open_tasks(api, cancelled)
    api.call("process.cancel", instance_id=cancelled)
    assert kinds(api, cancelled) == ["started", "cancelled"]


def test_a_chat_message_is_linked_not_copied_and_names_the_channel(server, api, unique_code):
    channel = create_channel(api)
    deploy_chat(api, "chat_reply.bpmn", channel["name"], unique_code)
    site = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    chat = f"chat-{uuid.uuid4().hex[:6]}"
    first = accepted(server, site, channel["config_id"], chat_id=chat, text="hello there")
    instance_id = first["instance_id"]
    eventually(lambda: api.call("process.status", instance_id=instance_id)["waiting_for"], bool)
    second = accepted(server, site, channel["config_id"], chat_id=chat, text="my secret answer")
    assert api.wait_for(instance_id)["status"] == "completed"
    events = history(api, instance_id)
    assert [e["kind"] for e in events] == ["started", "message_received", "message_received", "completed"]
    actor = {"type": "channel", "name": channel["name"]}
    assert events[0]["actor"] == events[1]["actor"] == events[2]["actor"] == actor
    assert [e["detail"] for e in events[1:3]] == [
        {"binding_id": first["binding_id"], "message_id": first["message_id"], "channel": "webchat"},
        {"binding_id": second["binding_id"], "message_id": second["message_id"], "channel": "webchat"}]
    messages = api.call("conversation.messages", binding_id=first["binding_id"], per_page=100)["items"]
    assert second["message_id"] in [m["message_id"] for m in messages]
    assert "my secret answer" not in str(events)


def test_pages_read_oldest_first_and_only_the_owner_sees_them(server, api, other_api, unique_code):
    api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"divisor": 0})["instance_id"]
    api.wait_for(instance_id)
    for _ in range(2):
        api.call("process.retry", instance_id=instance_id)
        api.wait_for(instance_id)
    whole = history(api, instance_id)
    assert len(whole) == 6
    first = api.call("process.history", instance_id=instance_id, page=1, per_page=4)
    second = api.call("process.history", instance_id=instance_id, page=2, per_page=4)
    assert first["total"] == second["total"] == 6 and (first["page"], first["per_page"]) == (1, 4)
    assert first["items"] + second["items"] == whole

    reader = key(server, api, "reader", permissions=("process.status",))
    assert reader.call("process.history", instance_id=instance_id)["total"] == 6
    stranger = key(server, api, "stranger", permissions=("process.list",))
    with pytest.raises(RpcError) as caught:
        stranger.call("process.history", instance_id=instance_id)
    assert caught.value.reason == "forbidden"
    for caller, instance in ((other_api, instance_id), (api, 10**9)):
        with pytest.raises(RpcError) as caught:
            caller.call("process.history", instance_id=instance)
        assert caught.value.reason == "not_found"
    with pytest.raises(RpcError) as caught:
        api.call("process.history", instance_id=instance_id, per_page=101)
    assert caught.value.reason == "invalid_params" and "per_page" in caught.value.message


def test_a_signal_and_a_correlated_message_are_recorded(server, api, unique_code):
    api.deploy(bpmn("cov_message_catch.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"due": 10})["instance_id"]
    eventually(lambda: api.call("process.status", instance_id=instance_id)["waiting_for"], bool)
    deadline = time.monotonic() + 10
    while True:  # its subscription is written with the save that made it wait
        try:
            api.call("message.correlate", name="payment_received", correlation={}, variables={"amount": 1})
            break
        except RpcError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    api.wait_for(instance_id)
    events = history(api, instance_id)
    assert [e["kind"] for e in events] == ["started", "message_received", "completed"]
    assert events[1]["detail"] == {"message": "payment_received"} and events[1]["element_id"] == "paid"
