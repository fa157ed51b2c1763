"""channel.* and conversation.*, the send_message operator (§2) and the
outbound web-chat message (§4.3) reaching a real local receiver."""
from __future__ import annotations

import hashlib
import hmac
import json
import re

import pytest

from tests.harness import RpcError, bpmn
from tests.integration.test_webchat import (NOWHERE, accepted, conversations_on, create_channel, deploy_chat,
                                            eventually, post_message)
from tests.receiver import Answer

SECRET = "webhook-secret-0123456789"
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
CHANNEL_FIELDS = {"config_id", "type", "name", "webhook_url", "has_secret", "enabled", "created_at"}
CONVERSATION_FIELDS = {"binding_id", "channel", "config_id", "chat_id", "external_user_id", "external_username",
                       "instance_id", "started_at", "last_message_at", "assignee", "candidate_group",
                       "customer_wrote_at", "window_closes_at"}


@pytest.fixture
def channel(api):
    return create_channel(api)


@pytest.fixture
def chat_key(api) -> str:
    return api.call("apikey.create", name="site backend", permissions=["conversation.send"])["api_key"]


def rpc_error(call, *args, **kwargs) -> RpcError:
    with pytest.raises(RpcError) as caught:
        call(*args, **kwargs)
    return caught.value


def messages_of(api, binding_id: int, **params) -> list[dict]:
    return api.call("conversation.messages", binding_id=binding_id, **params)["items"]


# -- channel.* ---------------------------------------------------------------------------------------

def test_channel_create_answers_the_configuration_and_never_the_secret(api):
    created = create_channel(api, webhook_secret=SECRET)
    assert set(created) == CHANNEL_FIELDS
    assert (created["type"], created["webhook_url"], created["has_secret"], created["enabled"]) == (
        "webchat", NOWHERE, True, True)
    assert type(created["config_id"]) is int and ISO_MS.match(created["created_at"])
    listed = api.call("channel.list", per_page=100)
    updated = api.call("channel.update", config_id=created["config_id"], name=created["name"] + "-renamed")
    assert updated["has_secret"] is True and updated["name"] == created["name"] + "-renamed"
    for answer in (created, listed, updated):
        assert SECRET not in json.dumps(answer)
    [item] = [c for c in listed["items"] if c["config_id"] == created["config_id"]]
    assert item == created


def test_channel_update_changes_only_what_is_given_and_a_null_secret_removes_it(api):
    created = create_channel(api, webhook_secret=SECRET)
    moved = api.call("channel.update", config_id=created["config_id"], webhook_url="https://example.com/hook")
    assert (moved["webhook_url"], moved["has_secret"], moved["name"]) == (
        "https://example.com/hook", True, created["name"])
    unsigned = api.call("channel.update", config_id=created["config_id"], webhook_secret=None)
    assert unsigned["has_secret"] is False and unsigned["webhook_url"] == "https://example.com/hook"
    disabled = api.call("channel.update", config_id=created["config_id"], enabled=False)
    assert disabled["enabled"] is False and disabled["has_secret"] is False
    error = rpc_error(api.call, "channel.update", config_id=created["config_id"], enabled="no")
    assert error.reason == "invalid_params" and "enabled" in error.message


def test_channel_list_is_a_page_newest_first_of_this_tenant_only(api, other_api):
    ours = [create_channel(api)["config_id"] for _ in range(3)]
    theirs = create_channel(other_api)["config_id"]
    page = api.call("channel.list", per_page=2)
    assert set(page) == {"items", "page", "per_page", "total"} and page["total"] >= 3
    assert [c["config_id"] for c in page["items"]] == [ours[2], ours[1]]
    assert api.call("channel.list", per_page=2, page=2)["items"][0]["config_id"] == ours[0]
    assert theirs not in [c["config_id"] for c in api.call("channel.list", per_page=100)["items"]]
    assert api.call("channel.list", type="telegram")["total"] == 0


@pytest.mark.parametrize("params, reason, phrase", [
    # Messenger channels refused before the messenger is asked (the rest: tests/integration/messengers/).
    ({"type": "telegram", "settings": {"bot_token": "123:abc"}}, "invalid_params", "'webhook_url'"),
    ({"type": "whatsapp", "webhook_url": None}, "invalid_params", "'settings'"),
    ({"type": "viber", "webhook_url": None, "settings": {"auth_token": "x", "sender_name": "A", "color": "b"}},
     "invalid_params", "'color'"),
    ({"type": "sms"}, "invalid_params", "'type'"),
    ({"webhook_url": None}, "invalid_params", "'webhook_url'"),
    ({"webhook_url": "ftp://files.example.com/in"}, "outbound_refused", "http and https"),
    ({"webhook_url": "http://user:pw@example.com/in"}, "outbound_refused", "user name"),
    ({"name": "12345"}, "invalid_params", "'name'"),
    ({"name": "  "}, "invalid_params", "'name'"),
    ({"webhook_secret": "short"}, "invalid_params", "'webhook_secret'"),
    ({"settings": {"color": "blue"}}, "invalid_params", "settings"),
    ({"secret": SECRET}, "invalid_params", "'secret'"),
])
def test_channel_create_refuses_what_it_cannot_run(api, params, reason, phrase):
    full = {"type": "webchat", "name": "refused-channel", "webhook_url": NOWHERE, **params}
    error = rpc_error(api.call, "channel.create", **full)
    assert error.reason == reason and phrase in error.message
    assert "refused-channel" not in [c["name"] for c in api.call("channel.list", per_page=100)["items"]]


def test_a_second_channel_with_the_same_name_is_a_conflict(api, channel):
    error = rpc_error(create_channel, api, name=channel["name"])
    assert error.reason == "conflict" and channel["name"] in error.message
    taken = create_channel(api)
    error = rpc_error(api.call, "channel.update", config_id=taken["config_id"], name=channel["name"])
    assert error.reason == "conflict"


def test_channel_methods_need_admin_and_stay_in_the_tenant(api, other_api, server, channel):
    key = api.call("apikey.create", name="chat only", permissions=["conversation.*"])["api_key"]
    error = rpc_error(server.api(key).call, "channel.list")
    assert error.reason == "forbidden" and error.data["permission"] == "admin"
    for method, params in (("channel.update", {"name": "stolen"}), ("channel.delete", {})):
        error = rpc_error(other_api.call, method, config_id=channel["config_id"], **params)
        assert error.reason == "not_found"
    assert api.call("channel.list", per_page=100)["items"][0]["name"] == channel["name"]


def test_channel_delete_is_refused_while_a_conversation_is_active(server, api, channel, chat_key, unique_code):
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    first = accepted(server, chat_key, channel["config_id"], chat_id="d-1", text="hi")
    error = rpc_error(api.call, "channel.delete", config_id=channel["config_id"])
    assert error.reason == "conflict" and "active" in error.message

    api.call("process.cancel", instance_id=first["instance_id"])
    assert api.call("channel.delete", config_id=channel["config_id"]) == {
        "config_id": channel["config_id"], "deleted": True}
    assert channel["config_id"] not in [c["config_id"] for c in api.call("channel.list", per_page=100)["items"]]
    assert post_message(server, chat_key, channel["config_id"], chat_id="d-1", text="hi").status_code == 404
    assert rpc_error(api.call, "conversation.messages", binding_id=first["binding_id"]).reason == "not_found"
    assert rpc_error(api.call, "channel.delete", config_id=channel["config_id"]).reason == "not_found"


def test_webhook_urls_to_private_addresses_are_refused_unless_allowed(tmp_path):
    """The SSRF guard's URL rules at channel.create/update, on a server of its own that does not allow
    private URLs (once: the check touches no database)."""
    from tests.harness import BatonServer

    database_url = f"sqlite:///{tmp_path / 'guarded.db'}"
    guarded = BatonServer(database_url, tmp_path, BATON_ALLOW_PRIVATE_URLS="0", BATON_WORKERS="0").start()
    try:
        api = guarded.api(guarded.create_tenant("guarded"))
        for url in ("http://127.0.0.1:8080/in", "http://10.1.2.3/in", "http://169.254.169.254/latest",
                    "http://localhost/in"):
            error = rpc_error(api.call, "channel.create", type="webchat", name="private", webhook_url=url)
            assert error.reason == "outbound_refused", url
        created = api.call("channel.create", type="webchat", name="public", webhook_url="https://example.com/in")
        error = rpc_error(api.call, "channel.update", config_id=created["config_id"],
                          webhook_url="http://192.168.1.1/in")
        assert error.reason == "outbound_refused"
        assert api.call("channel.list")["items"][0]["webhook_url"] == "https://example.com/in"
    finally:
        guarded.stop()


# -- binding processes at deploy ---------------------------------------------------------------------

def test_deploy_binds_a_webchat_start_event_by_name_or_by_config_id(api, channel, unique_code):
    by_name = deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    assert by_name["channels"] == [{"start_event_id": "chat_start", "config_id": channel["config_id"]}]
    by_id = deploy_chat(api, "chat_operator.bpmn", channel["config_id"], unique_code)
    assert by_id["channels"] == by_name["channels"] and by_id["webhooks"] == []
    [start] = api.call("definition.get", definition_id=by_id["definition_id"])["start_events"]
    assert start == {"element_id": "chat_start", "trigger": "webchat", "channel": str(channel["config_id"]),
                     "config_id": channel["config_id"], "default": True}


def test_deploy_refuses_a_channel_of_another_tenant_or_of_another_type(api, other_api, unique_code):
    theirs = create_channel(other_api)
    for reference in (theirs["name"], theirs["config_id"], "no-such-channel"):
        error = rpc_error(deploy_chat, api, "chat_operator.bpmn", reference, unique_code)
        assert error.reason == "invalid_params"
        [entry] = error.data["errors"]
        assert entry["element_id"] == "chat_start" and entry["line"] == 6
        assert f"'{reference}'" in entry["message"] and "does not exist" in entry["message"]
    ours = create_channel(api)
    xml = bpmn("chat_operator.bpmn").replace("__CHANNEL__", ours["name"]).replace(
        'value="webchat"', 'value="telegram"')
    error = rpc_error(api.deploy, xml, unique_code)
    assert "is a webchat channel" in error.data["errors"][0]["message"]
    assert api.call("definition.list", code=unique_code)["total"] == 0


# -- send_message ------------------------------------------------------------------------------------

def test_send_message_posts_the_rendered_text_signed_to_the_channel_webhook(server, api, receiver, chat_key,
                                                                             unique_code):
    channel = create_channel(api, f"{receiver.url}/chat", webhook_secret=SECRET)
    deploy_chat(api, "chat_reply.bpmn", channel["name"], unique_code)
    first = accepted(server, chat_key, channel["config_id"], chat_id="c-42", text="Where is my order?",
                     username="Zoë")
    [request] = receiver.wait_for(1)
    assert (request.method, request.path) == ("POST", "/chat")
    body = request.json()
    assert set(body) == {"chat_id", "text", "reply_to_message_id", "timestamp"}
    assert body["chat_id"] == "c-42" and body["text"] == "Hello Zoë! You wrote: Where is my order?"
    assert body["reply_to_message_id"] is None and ISO_MS.match(body["timestamp"])
    expected = "sha256=" + hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Baton-Signature"] == expected
    assert request.headers["X-Baton-Delivery"] and request.headers["X-Baton-Timestamp"].isdigit()

    waiting = eventually(lambda: api.call("process.status", instance_id=first["instance_id"])["waiting_for"], bool)
    assert waiting == [{"element_id": "wait_reply", "kind": "receiveTask", "message": "chat_message"}]
    second = accepted(server, chat_key, channel["config_id"], chat_id="c-42", text="Order 7")
    assert api.wait_for(first["instance_id"])["status"] == "completed"
    assert receiver.wait_for(2)[1].json()["text"] == "Thanks, noted: Order 7"

    messages = eventually(lambda: messages_of(api, first["binding_id"]),
                          lambda items: all(m["delivery"] == "sent" for m in items if m["direction"] == "out"))
    assert [(m["direction"], m["author"], m["text"], m["delivery"]) for m in messages] == [
        ("out", "process", "Thanks, noted: Order 7", "sent"),
        ("in", "customer", "Order 7", None),
        ("out", "process", "Hello Zoë! You wrote: Where is my order?", "sent"),
        ("in", "customer", "Where is my order?", None)]
    assert [m["message_id"] for m in messages if m["direction"] == "in"] == [second["message_id"], first["message_id"]]
    assert all(ISO_MS.match(m["created_at"]) for m in messages)
    assert rpc_error(api.call, "conversation.send", binding_id=first["binding_id"], text="late").reason == "conflict"


def test_send_message_without_a_conversation_fails_the_instance_clearly(api, unique_code):
    api.deploy(bpmn("chat_send_without_conversation.bpmn"), code=unique_code)
    deliveries = api.call("delivery.list")["total"]
    instance_id = api.call("process.start", definition_id=unique_code, variables={"name": "Ann"})["instance_id"]
    status = api.wait_for(instance_id)
    assert status["status"] == "failed" and status["error"]["element_id"] == "say"
    assert "no conversation" in status["error"]["message"]
    assert api.call("delivery.list")["total"] == deliveries


def test_send_message_text_is_checked_at_deploy(api, unique_code):
    xml = bpmn("chat_send_without_conversation.bpmn")
    for text, phrase in (("", "needs a 'text' property"), ("Hi {{ __class__ }}", "cannot be rendered")):
        error = rpc_error(api.deploy, xml.replace('value="Hello {{ name }}"', f'value="{text}"'), unique_code)
        [entry] = error.data["errors"]
        assert entry["element_id"] == "say" and phrase in entry["message"]


# -- conversation.send -------------------------------------------------------------------------------

def test_conversation_send_queues_an_operator_message_that_reaches_the_webhook_unsigned(
        server, api, receiver, chat_key, unique_code):
    channel = create_channel(api, f"{receiver.url}/chat")
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    first = accepted(server, chat_key, channel["config_id"], chat_id="op-1", text="Call me")
    answer = api.call("conversation.send", binding_id=first["binding_id"], text="An operator will call you.")
    assert set(answer) == {"binding_id", "message_id", "status"}
    assert (answer["binding_id"], answer["status"]) == (first["binding_id"], "queued")
    assert answer["message_id"] > first["message_id"]

    [request] = receiver.wait_for(1)
    body = request.json()
    assert (body["chat_id"], body["text"], body["reply_to_message_id"]) == ("op-1", "An operator will call you.", None)
    assert "X-Baton-Signature" not in request.headers
    [out, _] = eventually(lambda: messages_of(api, first["binding_id"]), lambda items: items[0]["delivery"] == "sent")
    assert (out["message_id"], out["direction"], out["author"]) == (answer["message_id"], "out", "operator")


def test_a_delivery_being_retried_shows_as_queued(server, api, chat_key, unique_code, receiver):
    receiver.default = Answer(503)
    channel = create_channel(api, f"{receiver.url}/chat")
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    first = accepted(server, chat_key, channel["config_id"], chat_id="q-1", text="hi")
    answer = api.call("conversation.send", binding_id=first["binding_id"], text="hello?")
    receiver.wait_for(1)
    [out, _] = messages_of(api, first["binding_id"])
    assert (out["message_id"], out["delivery"]) == (answer["message_id"], "queued")


def test_conversation_send_refusals(server, api, other_api, channel, chat_key, unique_code):
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    first = accepted(server, chat_key, channel["config_id"], chat_id="ref-1", text="hi")
    assert rpc_error(api.call, "conversation.send", binding_id=999_999_999, text="x").reason == "not_found"
    assert rpc_error(other_api.call, "conversation.send", binding_id=first["binding_id"],
                     text="x").reason == "not_found"
    for params, name in (({}, "text"), ({"text": 5}, "text"), ({"text": "x" * 10_001}, "text")):
        error = rpc_error(api.call, "conversation.send", binding_id=first["binding_id"], **params)
        assert error.reason == "invalid_params" and name in error.message
    assert rpc_error(api.call, "conversation.send", text="x").reason == "invalid_params"

    [task] = eventually(lambda: api.call("task.list", instance_id=first["instance_id"])["items"], bool)
    api.call("task.complete", task_id=task["task_id"])
    api.wait_for(first["instance_id"])
    error = rpc_error(api.call, "conversation.send", binding_id=first["binding_id"], text="x")
    assert error.reason == "conflict"
    assert [m["direction"] for m in messages_of(api, first["binding_id"])] == ["in"]


# -- conversation.list and conversation.messages -----------------------------------------------------

def test_conversation_list_shows_the_active_conversations_newest_first(server, api, channel, chat_key, unique_code):
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    one = accepted(server, chat_key, channel["config_id"], chat_id="l-1", text="a", user_id="u1", username="Ann")
    two = accepted(server, chat_key, channel["config_id"], chat_id="l-2", text="b")
    [newest, oldest] = conversations_on(api, channel["config_id"])
    assert set(newest) == CONVERSATION_FIELDS
    assert oldest == {**oldest, "binding_id": one["binding_id"], "channel": "webchat",
                      "config_id": channel["config_id"], "chat_id": "l-1", "external_user_id": "u1",
                      "external_username": "Ann", "instance_id": one["instance_id"]}
    assert (newest["binding_id"], newest["external_user_id"], newest["external_username"]) == (
        two["binding_id"], None, None)
    assert ISO_MS.match(oldest["started_at"]) and ISO_MS.match(oldest["last_message_at"])

    page = api.call("conversation.list", channel="webchat", per_page=1)
    assert set(page) == {"items", "page", "per_page", "total"} and page["total"] >= 2
    assert page["items"][0]["binding_id"] == two["binding_id"]
    assert api.call("conversation.list", channel="telegram") == {"items": [], "page": 1, "per_page": 20, "total": 0}
    assert rpc_error(api.call, "conversation.list", channel="sms").reason == "invalid_params"

    api.call("process.cancel", instance_id=one["instance_id"])
    assert [c["binding_id"] for c in conversations_on(api, channel["config_id"])] == [two["binding_id"]]


def test_conversation_messages_pages_newest_first_and_keeps_a_closed_conversation(
        server, api, channel, chat_key, unique_code):
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    first = accepted(server, chat_key, channel["config_id"], chat_id="p-1", text="one")
    for text in ("two", "three"):
        accepted(server, chat_key, channel["config_id"], chat_id="p-1", text=text)
    page = api.call("conversation.messages", binding_id=first["binding_id"], per_page=2, page=2)
    assert (page["total"], page["page"], page["per_page"]) == (3, 2, 2)
    [item] = page["items"]
    assert set(item) == {"message_id", "direction", "text", "author", "created_at", "delivery"}
    assert (item["message_id"], item["text"]) == (first["message_id"], "one")

    api.call("process.cancel", instance_id=first["instance_id"])
    assert [m["text"] for m in messages_of(api, first["binding_id"])] == ["three", "two", "one"]
    assert rpc_error(api.call, "conversation.messages", binding_id=999_999_999).reason == "not_found"


def test_another_tenant_sees_none_of_the_conversations(server, api, other_api, channel, chat_key, unique_code):
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    first = accepted(server, chat_key, channel["config_id"], chat_id="t-1", text="private")
    theirs = other_api.call("conversation.list", per_page=100)["items"]
    assert first["binding_id"] not in [c["binding_id"] for c in theirs]
    assert rpc_error(other_api.call, "conversation.messages", binding_id=first["binding_id"]).reason == "not_found"
    assert other_api.call("task.list", instance_id=first["instance_id"])["total"] == 0


def test_conversation_methods_need_their_permissions(server, api, channel, chat_key, unique_code):
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    first = accepted(server, chat_key, channel["config_id"], chat_id="perm", text="x")
    sender = server.api(chat_key)
    assert sender.call("conversation.send", binding_id=first["binding_id"], text="ok")["status"] == "queued"
    error = rpc_error(sender.call, "conversation.list")
    assert error.reason == "forbidden" and error.data["permission"] == "conversation.list"
