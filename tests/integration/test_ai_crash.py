"""Issue 6's durability proof: ``kill -9`` of the server while AI turns are on the wire loses no
customer message and doubles no answer.

Each backend gets its own database, server (embedded default: two in-process workers) and fake
OpenAI-compatible model, slow at first (0.7 s per answer), so at the kill some chats have been
answered, some turns are waiting for the model and some have not started. The server is started
again on the same database, the model is now instant, and half of the customers write again at
once, while their first turn may still be held by the dead server's lease.

Then, within 90 s: every chat's last AI answer answers its last customer message; no customer
message is missing from its conversation; a chat that did not write again has exactly one AI
answer, and every AI message reached the receiver (a re-sent delivery keeps its
``X-Baton-Delivery`` id, so distinct ids per chat equal the chat's AI messages).
"""
from __future__ import annotations

import collections
import re
import time
import uuid

import pytest

from tests.conftest import make_database_url
from tests.harness import bpmn, server_with_model
from tests.integration.test_webchat import create_channel, post_message

pytestmark = pytest.mark.slow  # each test kills and restarts its own server

CHATS = 12
SLOW_S = 0.7
SETTLE_TIMEOUT_S = 90.0  # a turn on the wire at the kill is leased for the model's bound + 10 s (~15 s here)


@pytest.fixture
def crash_setup(backend, tmp_path_factory):
    with server_with_model(make_database_url(backend, tmp_path_factory), tmp_path_factory.mktemp("ai-crash"),
                           BATON_AI_TIMEOUT_S="2", BATON_AI_RETRIES="0",
                           BATON_DELIVERY_RETRY_SCALE="0.01") as (server, fake, receiver):
        yield server, fake, receiver


def test_kill_9_during_model_calls_loses_no_message_and_doubles_no_answer(crash_setup):
    server, fake, receiver = crash_setup
    server.start()
    api = server.api(server.create_tenant(f"crash-{uuid.uuid4().hex[:8]}"))
    channel = create_channel(api, webhook_url=receiver.url + "/chat")
    api.deploy(bpmn("chat_ai.bpmn").replace("__CHANNEL__", str(channel["config_id"]))
               .replace("__MAX_TURNS__", "10").replace("__MODEL__", ""), code=f"ai-crash-{uuid.uuid4().hex[:6]}")
    key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]

    def say(chat_id: str, text: str) -> dict:
        response = post_message(server, key, channel["config_id"], chat_id=chat_id, text=text)
        assert response.status_code == 202, response.text
        return response.json()

    fake.delay = SLOW_S
    chats = [f"c{i}-{uuid.uuid4().hex[:6]}" for i in range(CHATS)]
    bindings = {chat: say(chat, f"first from {chat}")["binding_id"] for chat in chats}
    fake.wait_for_requests(4, timeout=30)
    server.kill()
    answered_before_kill = len([r for r in receiver.requests if r.json().get("text", "").startswith("AI #")])
    assert answered_before_kill < CHATS  # the kill really came mid-way

    fake.delay = 0
    server.start()
    writing_again = chats[::2]
    for chat in writing_again:
        say(chat, f"again from {chat}")
    last_text = {chat: f"again from {chat}" if chat in writing_again else f"first from {chat}" for chat in chats}

    def answers_by_chat() -> dict[str, list]:
        found = collections.defaultdict(list)
        for request in list(receiver.requests):
            body = request.json()
            found[body["chat_id"]].append((request.headers.get("X-Baton-Delivery"), body["text"]))
        return found

    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        received = answers_by_chat()
        if all(received[chat] and received[chat][-1][1].endswith(": " + last_text[chat]) for chat in chats):
            break
        time.sleep(0.2)
    received = answers_by_chat()
    for chat in chats:
        assert received[chat] and re.fullmatch(rf"AI #\d+: {re.escape(last_text[chat])}", received[chat][-1][1]), (
            chat, received[chat], server.output()[-2000:])

    api.wait_until_idle()  # a doubled turn would have run by now
    received = answers_by_chat()
    for chat in chats:
        items = list(reversed(api.call("conversation.messages", binding_id=bindings[chat], per_page=100)["items"]))
        customer = [m["text"] for m in items if m["author"] == "customer"]
        ai = [m for m in items if m["author"] == "ai"]
        assert customer == [f"first from {chat}"] + ([f"again from {chat}"] if chat in writing_again else [])
        assert 1 <= len(ai) <= len(customer)
        if chat not in writing_again:
            assert len(ai) == 1
        assert len({delivery_id for delivery_id, _ in received[chat]}) == len(ai)
        assert all(m["delivery"] == "sent" for m in ai)
