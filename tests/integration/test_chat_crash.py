"""Issue 5's proof: a server ``kill -9`` between accepting chat messages and delivering the answers
loses nothing.

Each backend gets its own database and its own server (the embedded default: HTTP and two
in-process workers; the session ``server`` fixture is not used, this test kills what it runs).
A web-chat channel points at a local ``Receiver``; a process bound to it answers every first
message with one ``send_message`` and ends.

30 messages, each from a new ``chat_id``, are posted to ``/channels/webchat/{config_id}/inbound``
and all answered 202. The receiver is failing (500) and then slow (2 s per answer) at first, so at
the moment of the kill deliveries are waiting for a retry, in flight on the wire, or not even
queued yet (their instance has not run). After the last 202, as soon as the receiver has had its
500s and two more requests are hanging in its delay, the server gets SIGKILL; it is
started again on the same database and the receiver now answers 200 at once.

Then, within 120 s: every accepted chat has received its answer with the exact text; a chat that
received it more than once (at least once: an answer in flight at the kill is sent again) got the
very same delivery (same ``X-Baton-Delivery`` id, same bytes); ``delivery.list`` shows exactly one
delivery per chat, all ``sent``, with the ids the receiver saw; every instance completed.
"""
from __future__ import annotations

import collections
import concurrent.futures
import time
import uuid

import pytest

from tests.conftest import BACKENDS
from tests.harness import BatonServer
from tests.integration.test_webchat import create_channel, post_message
from tests.receiver import Answer

MESSAGES = 30
FAILING_FIRST = 5            # the first answers of the receiver are 500s
SLOW_ANSWER_S = 2.0          # then it is slow until the kill
# A delivery on the wire when the server died is leased for its timeout + 30 s (no second send while
# a live worker may still be waiting on the receiver): ~40 s of the wait is that lease running out.
SETTLE_TIMEOUT_S = 120.0

CHAT_ANSWER = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
                  xmlns:camunda="http://camunda.org/schema/1.0/bpmn"
                  id="defs_chat_crash" targetNamespace="http://baton.dev/tests">
  <bpmn:process id="chat_crash" isExecutable="true">
    <bpmn:startEvent id="chat_start">
      <bpmn:extensionElements>
        <camunda:properties>
          <camunda:property name="trigger" value="webchat" />
          <camunda:property name="channel" value="__CHANNEL__" />
        </camunda:properties>
      </bpmn:extensionElements>
    </bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="chat_start" targetRef="answer" />
    <bpmn:serviceTask id="answer" name="Answer">
      <bpmn:extensionElements>
        <camunda:properties>
          <camunda:property name="operator" value="send_message" />
          <camunda:property name="text" value="Answer to {{ chat_id }}: {{ message_text }}" />
        </camunda:properties>
      </bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="answer" targetRef="end" />
    <bpmn:endEvent id="end" />
  </bpmn:process>
</bpmn:definitions>
"""


def expected_text(chat_id: str) -> str:
    return f"Answer to {chat_id}: question of {chat_id}"


def all_deliveries(api) -> list[dict]:
    items, page = [], 1
    while True:
        answer = api.call("delivery.list", page=page, per_page=100)
        items += answer["items"]
        if len(items) >= answer["total"] or not answer["items"]:
            return items
        page += 1


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_9_between_acceptance_and_delivery_loses_no_answer(backend, own_database, tmp_path, receiver):
    began = time.monotonic()
    server = BatonServer(own_database, tmp_path, BATON_JOB_LEASE_S="2", BATON_DELIVERY_RETRY_SCALE="0.01")
    try:
        server.start()
        api = server.api(server.create_tenant(f"chat-crash-{uuid.uuid4().hex[:6]}"))
        channel = create_channel(api, f"{receiver.url}/chat")
        api.deploy(CHAT_ANSWER.replace("__CHANNEL__", channel["name"]), code=f"chat-crash-{uuid.uuid4().hex[:6]}")
        chat_key = api.call("apikey.create", name="site backend", permissions=["conversation.send"])["api_key"]

        # --- the receiver fails, then is slow; 30 new chats are accepted --------------------------
        receiver.default = Answer(200, {"ok": True}, delay_s=SLOW_ANSWER_S)
        receiver.script(*[Answer(500) for _ in range(FAILING_FIRST)])
        chat_ids = [f"crash-{i:02d}-{uuid.uuid4().hex[:6]}" for i in range(MESSAGES)]

        def send(chat_id: str):
            return chat_id, post_message(server, chat_key, channel["config_id"], chat_id=chat_id,
                                         text=f"question of {chat_id}", username="Ann")

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            responses = dict(pool.map(send, chat_ids))
        refused = {c: (r.status_code, r.text[:200]) for c, r in responses.items() if r.status_code != 202}
        assert not refused, f"messages not accepted: {refused}\n{server.output()[-3000:]}"
        accepted = {c: r.json() for c, r in responses.items()}

        # --- kill -9 as soon as deliveries are failing and in flight -------------------------------
        # (the 500s are answered at once; the next attempts sit in the receiver's 2 s delay)
        receiver.wait_for(FAILING_FIRST + 2, timeout=30)
        server.kill()
        killed_at = time.time()
        seen_at_kill = {r.json()["chat_id"] for r in list(receiver.requests)}
        assert len(seen_at_kill) < MESSAGES, "every answer had reached the receiver before the kill: kill earlier"
        assert seen_at_kill, "no delivery had been attempted before the kill"

        # --- restart on the same database, the receiver now answers at once ------------------------
        receiver.default = Answer(200, {"ok": True})
        receiver.script()
        restart_began = time.monotonic()
        server.start()

        def settled() -> bool:
            got = {r.json()["chat_id"] for r in list(receiver.requests)}
            sent = api.call("delivery.list", status="sent", per_page=1)["total"]
            return got >= set(chat_ids) and sent >= MESSAGES

        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not settled():
            if time.monotonic() > deadline:
                got = {r.json()["chat_id"] for r in list(receiver.requests)}
                deliveries = all_deliveries(api)
                raise AssertionError(
                    f"{SETTLE_TIMEOUT_S:.0f} s after the restart: missing answers for "
                    f"{sorted(set(chat_ids) - got)[:10]}; deliveries not sent: "
                    f"{[d for d in deliveries if d['status'] != 'sent'][:5]}\n{server.output()[-4000:]}")
            time.sleep(0.2)
        settle_s = time.monotonic() - restart_began
        api.wait_until_idle()  # any duplicate still on its way has been sent before the checks

        # --- every accepted message got its answer, exactly its text --------------------------------
        requests_seen = list(receiver.requests)
        by_chat = collections.defaultdict(list)
        for request in requests_seen:
            by_chat[request.json()["chat_id"]].append(request)
        assert set(by_chat) == set(chat_ids), f"answers to unknown chats: {set(by_chat) - set(chat_ids)}"
        wrong_text = {c: {r.json()["text"] for r in reqs} for c, reqs in by_chat.items()
                      if {r.json()["text"] for r in reqs} != {expected_text(c)}}
        assert not wrong_text, f"answers with another text: {wrong_text}"
        bad_path = [(r.method, r.path) for r in requests_seen if (r.method, r.path) != ("POST", "/chat")]
        assert not bad_path, bad_path

        # --- duplicates are one delivery sent again, never a second delivery ------------------------
        uids = {c: {r.headers["X-Baton-Delivery"] for r in reqs} for c, reqs in by_chat.items()}
        split = {c: u for c, u in uids.items() if len(u) != 1}
        assert not split, f"chats answered by more than one delivery (a doubled send_message): {split}"
        bodies = {c: {r.body for r in reqs} for c, reqs in by_chat.items()}
        assert all(len(b) == 1 for b in bodies.values()), \
            f"a re-sent delivery with other bytes: {[c for c, b in bodies.items() if len(b) != 1]}"
        duplicated = {c: len(reqs) for c, reqs in by_chat.items() if len(reqs) > 1}

        # --- delivery.list: one per chat, all sent, the ids the receiver saw ------------------------
        deliveries = all_deliveries(api)
        assert len(deliveries) == MESSAGES, f"{len(deliveries)} deliveries for {MESSAGES} chats: {deliveries}"
        assert all(d["status"] == "sent" and d["sent_at"] for d in deliveries), \
            [d for d in deliveries if d["status"] != "sent"]
        assert {d["channel_id"] for d in deliveries} == {channel["config_id"]}
        assert {d["delivery_uid"] for d in deliveries} == {next(iter(u)) for u in uids.values()}

        # --- every instance the 202s named completed ------------------------------------------------
        for chat_id, answer in accepted.items():
            status = api.wait_for(answer["instance_id"], timeout=20)
            assert status["status"] == "completed", (chat_id, status)
            assert status["variables"]["chat_id"] == chat_id, status

        attempts = collections.Counter(d["attempts"] for d in deliveries)
        print(f"\n[{backend}] {MESSAGES} accepted; at the kill the receiver had seen {len(seen_at_kill)} chats "
              f"({sum(1 for r in requests_seen if r.at <= killed_at)} requests); after the restart all "
              f"answered in {settle_s:.1f} s; duplicated deliveries (same uid): {duplicated or 'none'}; "
              f"attempts per delivery: {dict(sorted(attempts.items()))}; total {time.monotonic() - began:.1f} s")
    finally:
        server.stop()
