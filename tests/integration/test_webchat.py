"""POST /channels/webchat/{config_id}/inbound, over real HTTP."""
from __future__ import annotations

import concurrent.futures
import time
import uuid

import pytest
import requests

from tests.harness import bpmn

# A webhook URL nothing listens on: these tests send nothing out (test_conversations.py does).
NOWHERE = "http://127.0.0.1:9/chat"
START_VARIABLES = ("message_text", "external_username", "external_user_id", "channel", "chat_id", "binding_id")


# -- helpers shared with test_conversations.py --------------------------------------------------------

def create_channel(api, webhook_url: str = NOWHERE, **extra) -> dict:
    params = {"type": "webchat", "name": f"site-{uuid.uuid4().hex[:8]}", "webhook_url": webhook_url, **extra}
    return api.call("channel.create", **params)


def deploy_chat(api, fixture: str, channel_reference, code: str) -> dict:
    return api.deploy(bpmn(fixture).replace("__CHANNEL__", str(channel_reference)), code=code)


def post_message(server, key: str | None, config_id, body=None, **fields) -> requests.Response:
    headers = {} if key is None else {"X-API-Key": key}
    return requests.post(f"{server.base_url}/channels/webchat/{config_id}/inbound",
                         json=fields if body is None else body, headers=headers, timeout=30)


def accepted(server, key: str, config_id, **fields) -> dict:
    response = post_message(server, key, config_id, **fields)
    assert response.status_code == 202, response.text
    return response.json()


def eventually(read, check, timeout: float = 20.0):
    """``read()`` again until ``check(value)`` holds; the last value otherwise (and the assert fails)."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if check(value) or time.monotonic() > deadline:
            assert check(value), value
            return value
        time.sleep(0.03)


def conversations_on(api, config_id: int) -> list[dict]:
    """The channel's active conversations (the newest page is enough: each test has its own channel)."""
    return [c for c in api.call("conversation.list", per_page=100)["items"] if c["config_id"] == config_id]


def variables_of(api, instance_id: int) -> dict:
    return api.call("process.status", instance_id=instance_id)["variables"]


@pytest.fixture
def channel(api):
    return create_channel(api)


@pytest.fixture
def chat_key(api) -> str:
    """A key with only ``conversation.send``: what a caller's backend would use."""
    return api.call("apikey.create", name="site backend", permissions=["conversation.send"])["api_key"]


@pytest.fixture
def collecting(api, channel, unique_code):
    deploy_chat(api, "chat_collect.bpmn", channel["name"], unique_code)
    return channel


# -- starting ---------------------------------------------------------------------------------------

def test_first_message_starts_the_bound_process_with_the_start_variables(server, api, channel, chat_key,
                                                                         unique_code):
    deploy_chat(api, "chat_operator.bpmn", channel["config_id"], unique_code)
    response = post_message(server, chat_key, channel["config_id"], chat_id="c-1", text="Hi there",
                            user_id="u-7", username="Zoë")
    assert response.status_code == 202
    answer = response.json()
    assert set(answer) == {"accepted", "binding_id", "instance_id", "message_id"} and answer["accepted"] is True
    assert all(type(answer[k]) is int for k in ("binding_id", "instance_id", "message_id"))

    api.wait_for(answer["instance_id"], statuses=("running",))
    [task] = eventually(lambda: api.call("task.list", instance_id=answer["instance_id"])["items"], bool)
    expected = {"message_text": "Hi there", "external_username": "Zoë", "external_user_id": "u-7",
                "channel": "webchat", "chat_id": "c-1", "binding_id": answer["binding_id"]}
    assert {k: task["variables"].get(k) for k in START_VARIABLES} == expected
    assert task["binding_id"] == answer["binding_id"]
    status = api.call("process.status", instance_id=answer["instance_id"])
    assert status["code"] == unique_code and status["variables"] == expected


def test_optional_user_fields_become_null_variables(server, api, channel, chat_key, unique_code):
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    answer = accepted(server, chat_key, channel["config_id"], chat_id="anon", text="hello", user_id=None)
    variables = eventually(lambda: variables_of(api, answer["instance_id"]), lambda v: "chat_id" in v)
    assert variables["external_user_id"] is None and variables["external_username"] is None


def test_the_latest_definition_bound_to_the_channel_starts(server, api, chat_key, unique_code):
    channel = create_channel(api)
    first = deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    second = deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    answer = accepted(server, chat_key, channel["config_id"], chat_id="v", text="x")
    assert api.call("process.status", instance_id=answer["instance_id"])["definition_id"] == second["definition_id"]
    assert first["definition_id"] != second["definition_id"]

    # A new version bound elsewhere unbinds the code from this channel.
    elsewhere = create_channel(api)
    deploy_chat(api, "chat_operator.bpmn", elsewhere["name"], unique_code)
    response = post_message(server, chat_key, channel["config_id"], chat_id="w", text="x")
    assert response.status_code == 409 and response.json()["error"]["code"] == "conflict"


# -- routing (§6) -----------------------------------------------------------------------------------

def test_a_message_for_an_open_conversation_goes_to_the_waiting_chat_message_catch_event(
        server, api, collecting, chat_key):
    first = accepted(server, chat_key, collecting["config_id"], chat_id="r-1", text="one", username="Ann")
    second = accepted(server, chat_key, collecting["config_id"], chat_id="r-1", text="two", user_id="ann-1")
    assert (second["binding_id"], second["instance_id"]) == (first["binding_id"], first["instance_id"])
    assert second["message_id"] > first["message_id"]

    variables = eventually(lambda: variables_of(api, first["instance_id"]), lambda v: v.get("texts") == ["one", "two"])
    assert variables["message_text"] == "two" and variables["binding_id"] == first["binding_id"]
    assert variables["external_user_id"] == "ann-1" and variables["external_username"] == "Ann"
    waiting = api.call("process.status", instance_id=first["instance_id"])["waiting_for"]
    assert waiting == [{"element_id": "wait_message", "kind": "intermediateCatchEvent", "message": "chat_message"}]


def test_a_message_nothing_waits_for_is_only_stored(server, api, channel, chat_key, unique_code):
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    first = accepted(server, chat_key, channel["config_id"], chat_id="s-1", text="first")
    api.wait_for(first["instance_id"], statuses=("running",))
    eventually(lambda: api.call("task.list", instance_id=first["instance_id"])["items"], bool)
    second = accepted(server, chat_key, channel["config_id"], chat_id="s-1", text="second")
    assert second["instance_id"] == first["instance_id"]

    messages = api.call("conversation.messages", binding_id=first["binding_id"])["items"]
    assert [(m["message_id"], m["text"], m["direction"], m["author"], m["delivery"]) for m in messages] == [
        (second["message_id"], "second", "in", "customer", None),
        (first["message_id"], "first", "in", "customer", None)]
    api.wait_until_idle()  # the chat_message job has run
    status = api.call("process.status", instance_id=first["instance_id"])
    assert status["status"] == "running" and status["variables"]["message_text"] == "first"
    assert [w["element_id"] for w in status["waiting_for"]] == ["answer"]


def test_the_conversation_closes_when_the_instance_ends_and_the_chat_then_starts_anew(
        server, api, collecting, chat_key):
    first = accepted(server, chat_key, collecting["config_id"], chat_id="e-1", text="hello")
    accepted(server, chat_key, collecting["config_id"], chat_id="e-1", text="bye")
    status = api.wait_for(first["instance_id"])
    assert status["status"] == "completed" and status["variables"]["texts"] == ["hello", "bye"]
    active = api.call("conversation.list", per_page=100)["items"]
    assert first["binding_id"] not in [c["binding_id"] for c in active]

    again = accepted(server, chat_key, collecting["config_id"], chat_id="e-1", text="hello again")
    assert again["binding_id"] != first["binding_id"] and again["instance_id"] != first["instance_id"]
    variables = eventually(lambda: variables_of(api, again["instance_id"]), lambda v: "texts" in v)
    assert variables["texts"] == ["hello again"]


def test_the_conversation_closes_when_the_instance_fails(server, api, channel, chat_key, unique_code):
    xml = bpmn("chat_collect.bpmn").replace("__CHANNEL__", channel["name"]).replace(
        "texts = texts + [message_text]", "texts = texts + [1 / 0]")
    api.deploy(xml, code=unique_code)
    first = accepted(server, chat_key, channel["config_id"], chat_id="f-1", text="hello")
    api.wait_for(first["instance_id"], statuses=("running",))
    eventually(lambda: variables_of(api, first["instance_id"]), lambda v: "texts" in v)
    accepted(server, chat_key, channel["config_id"], chat_id="f-1", text="boom")
    assert api.wait_for(first["instance_id"])["status"] == "failed"
    assert conversations_on(api, channel["config_id"]) == []
    again = accepted(server, chat_key, channel["config_id"], chat_id="f-1", text="anyone?")
    assert again["instance_id"] != first["instance_id"]


def test_cancelling_the_instance_closes_its_conversation(server, api, collecting, chat_key):
    first = accepted(server, chat_key, collecting["config_id"], chat_id="x-1", text="hello")
    api.call("process.cancel", instance_id=first["instance_id"])
    active = api.call("conversation.list", per_page=100)["items"]
    assert first["binding_id"] not in [c["binding_id"] for c in active]
    again = accepted(server, chat_key, collecting["config_id"], chat_id="x-1", text="still there?")
    assert again["instance_id"] != first["instance_id"]


def _in_message_ids_oldest_first(api, binding_id: int) -> list[tuple[int, str]]:
    items = api.call("conversation.messages", binding_id=binding_id, per_page=100)["items"]
    return sorted((m["message_id"], m["text"]) for m in items if m["direction"] == "in")


def test_twenty_concurrent_messages_of_one_chat_are_processed_one_at_a_time_in_order(
        server, api, collecting, chat_key):
    first = accepted(server, chat_key, collecting["config_id"], chat_id="burst", text="m00")
    texts = [f"m{n:02d}" for n in range(1, 21)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda text: accepted(server, chat_key, collecting["config_id"],
                                                      chat_id="burst", text=text), texts))
    assert {a["binding_id"] for a in answers} == {first["binding_id"]}
    assert len({a["message_id"] for a in answers}) == 20

    variables = eventually(lambda: variables_of(api, first["instance_id"]), lambda v: len(v.get("texts", [])) == 21)
    stored = _in_message_ids_oldest_first(api, first["binding_id"])
    assert len(stored) == 21
    assert variables["texts"] == [text for _, text in stored]  # the order they were accepted in
    assert sorted(variables["texts"]) == ["m00", *texts]


def test_twenty_concurrent_first_messages_of_a_new_chat_open_one_conversation(server, api, collecting, chat_key):
    texts = [f"n{n:02d}" for n in range(20)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda text: accepted(server, chat_key, collecting["config_id"],
                                                      chat_id="rush", text=text), texts))
    assert len({(a["binding_id"], a["instance_id"]) for a in answers}) == 1
    [answer] = [a for a in answers if a["message_id"] == min(x["message_id"] for x in answers)]
    variables = eventually(lambda: variables_of(api, answer["instance_id"]), lambda v: len(v.get("texts", [])) == 20)
    assert variables["texts"] == [text for _, text in _in_message_ids_oldest_first(api, answer["binding_id"])]
    assert [c["binding_id"] for c in conversations_on(api, collecting["config_id"])] == [answer["binding_id"]]


def test_the_same_chat_id_on_two_channels_is_two_conversations(server, api, chat_key, unique_code):
    one, two = create_channel(api), create_channel(api)
    deploy_chat(api, "chat_operator.bpmn", one["name"], unique_code)
    deploy_chat(api, "chat_operator.bpmn", two["name"], unique_code + "-b")
    a = accepted(server, chat_key, one["config_id"], chat_id="same", text="x")
    b = accepted(server, chat_key, two["config_id"], chat_id="same", text="x")
    assert a["binding_id"] != b["binding_id"] and a["instance_id"] != b["instance_id"]


# -- refusals ---------------------------------------------------------------------------------------

def _error(response: requests.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    return body["error"]["message"]


def test_a_missing_or_unknown_key_is_401(server, collecting):
    _error(post_message(server, None, collecting["config_id"], chat_id="a", text="b"), 401, "unauthorized")
    unknown = "bt_000000000000_" + "A" * 32
    _error(post_message(server, unknown, collecting["config_id"], chat_id="a", text="b"), 401, "unauthorized")
    _error(post_message(server, "garbage", collecting["config_id"], chat_id="a", text="b"), 401, "unauthorized")


def test_a_revoked_key_is_401(server, api, collecting):
    created = api.call("apikey.create", name="gone", permissions=["conversation.send"])
    api.call("apikey.revoke", key_id=created["key_id"])
    response = post_message(server, created["api_key"], collecting["config_id"], chat_id="a", text="b")
    _error(response, 401, "unauthorized")


def test_a_key_without_conversation_send_is_403(server, api, collecting):
    key = api.call("apikey.create", name="no chat", permissions=["process.*", "task.list"])["api_key"]
    message = _error(post_message(server, key, collecting["config_id"], chat_id="a", text="b"), 403, "forbidden")
    assert "conversation.send" in message
    assert conversations_on(api, collecting["config_id"]) == []


def test_a_key_of_another_tenant_is_403_and_nothing_is_stored(server, api, other_tenant_key, collecting):
    response = post_message(server, other_tenant_key, collecting["config_id"], chat_id="intruder", text="b")
    _error(response, 403, "forbidden")
    assert conversations_on(api, collecting["config_id"]) == []


def test_an_unknown_or_disabled_channel_is_404(server, api, collecting, chat_key):
    _error(post_message(server, chat_key, 999_999_999, chat_id="a", text="b"), 404, "not_found")
    _error(post_message(server, chat_key, 2**70, chat_id="a", text="b"), 404, "not_found")
    _error(post_message(server, chat_key, "not-a-number", chat_id="a", text="b"), 404, "not_found")
    api.call("channel.update", config_id=collecting["config_id"], enabled=False)
    _error(post_message(server, chat_key, collecting["config_id"], chat_id="a", text="b"), 404, "not_found")
    api.call("channel.update", config_id=collecting["config_id"], enabled=True)
    assert post_message(server, chat_key, collecting["config_id"], chat_id="a", text="b").status_code == 202


@pytest.mark.parametrize("body, field", [
    ({"text": "hi"}, "chat_id"),
    ({"chat_id": None, "text": "hi"}, "chat_id"),
    ({"chat_id": 42, "text": "hi"}, "chat_id"),
    ({"chat_id": "", "text": "hi"}, "chat_id"),
    ({"chat_id": "c" * 256, "text": "hi"}, "chat_id"),
    ({"chat_id": "c"}, "text"),
    ({"chat_id": "c", "text": ["hi"]}, "text"),
    ({"chat_id": "c", "text": ""}, "text"),
    ({"chat_id": "c", "text": "x" * 10_001}, "text"),
    ({"chat_id": "c", "text": "hi", "user_id": 7}, "user_id"),
    ({"chat_id": "c", "text": "hi", "username": {"first": "Ann"}}, "username"),
    ({"chat_id": "c", "text": "hi", "username": "u" * 256}, "username"),
])
def test_a_missing_or_mistyped_field_is_400_naming_it(server, api, collecting, chat_key, body, field):
    message = _error(post_message(server, chat_key, collecting["config_id"], body=body), 400, "bad_request")
    assert f"'{field}'" in message
    assert conversations_on(api, collecting["config_id"]) == []


@pytest.mark.parametrize("data, content_type", [
    (b"{not json", "application/json"),
    (b'["chat_id", "text"]', "application/json"),
    (b'{"chat_id": "c", "text": NaN}', "application/json"),
    (b"chat_id=c&text=hi", "application/x-www-form-urlencoded"),
])
def test_a_body_that_is_not_a_json_object_is_400(server, collecting, chat_key, data, content_type):
    response = requests.post(f"{server.base_url}/channels/webchat/{collecting['config_id']}/inbound", data=data,
                             headers={"X-API-Key": chat_key, "Content-Type": content_type}, timeout=30)
    _error(response, 400, "bad_request")


def test_an_oversized_body_is_413_and_a_wrong_method_405(server, collecting, chat_key):
    url = f"{server.base_url}/channels/webchat/{collecting['config_id']}/inbound"
    response = requests.post(url, data=b'{"chat_id": "c", "text": "' + b"a" * (1 << 20) + b'"}',
                             headers={"X-API-Key": chat_key, "Content-Type": "application/json"}, timeout=30)
    _error(response, 413, "payload_too_large")
    _error(requests.get(url, headers={"X-API-Key": chat_key}, timeout=30), 405, "method_not_allowed")


def test_no_definition_bound_is_409_and_nothing_is_stored(server, api, channel, chat_key):
    before = api.call("process.list")["total"]
    message = _error(post_message(server, chat_key, channel["config_id"], chat_id="lonely", text="hi"),
                     409, "conflict")
    assert str(channel["config_id"]) in message
    assert api.call("process.list")["total"] == before
    assert conversations_on(api, channel["config_id"]) == []
