"""Issue 12's crash proof: a server ``kill -9`` between Telegram updates' 200 and their replies
loses nothing and doubles nothing.

Each backend gets its own database, server and fake Bot API. A process bound to the Telegram
channel answers every first message with one ``send_message`` and ends. 20 updates, each from a new
chat, are delivered the way Telegram does and all answered 200. The fake answers every sendMessage
with 502 meanwhile, so at the kill the replies are failing and waiting for a retry, on the wire, or
not even queued yet (their instance has not run). The server gets SIGKILL, the fake recovers, and
the server starts again on the same database.

Then Telegram delivers every update once more (as it does when it doubts an answer arrived). Within
120 s: every chat got exactly one reply, with its exact text; every redelivered update was
acknowledged and ignored (one conversation, one customer message, one instance per chat).
"""
from __future__ import annotations

import collections
import time
import uuid

import pytest

from tests.conftest import BACKENDS
from tests.fakes.server import Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import BatonServer
from tests.integration.messengers.helpers import new_chat_id
from tests.integration.test_chat_crash import CHAT_ANSWER, all_deliveries

UPDATES = 20
FAILING_SENDS_BEFORE_KILL = 3
SETTLE_TIMEOUT_S = 120.0      # a reply on the wire at the kill is leased for its timeout + 30 s


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_9_between_the_200_and_the_reply_gives_exactly_one_reply(backend, own_database, tmp_path):
    fake = FakeTelegram().start()
    server = BatonServer(own_database, tmp_path, BATON_JOB_LEASE_S="2", BATON_DELIVERY_RETRY_SCALE="0.01",
                         BATON_TELEGRAM_API_URL=fake.api_url)
    try:
        server.start()
        api = server.api(server.create_tenant(f"tg-crash-{uuid.uuid4().hex[:6]}"))
        token = fake.add_bot("Crash Bot")
        channel = api.call("channel.create", type="telegram", name=f"tg-{uuid.uuid4().hex[:6]}",
                           settings={"bot_token": token})
        api.deploy(CHAT_ANSWER.replace('value="webchat"', 'value="telegram"').replace("__CHANNEL__", channel["name"]),
                   code=f"tg-crash-{uuid.uuid4().hex[:6]}")

        # --- every reply fails while the updates are taken; kill -9 once a few replies failed --------
        fake.script(Reply(502, b"<html>Bad Gateway</html>"), times=10_000, path_endswith=f"{token}/sendMessage")
        chats = [new_chat_id() for _ in range(UPDATES)]
        updates = {chat: fake.text_update(chat, f"question of {chat}") for chat in chats}
        for update in updates.values():
            assert fake.deliver(token, update).status_code == 200
        fake.wait_for(f"{token}/sendMessage", FAILING_SENDS_BEFORE_KILL, timeout=30)
        server.kill()
        assert fake.sent == [], "a reply went out before the kill"
        # (a request the kill cut short may have arrived without its body)
        tried = {r.json()["chat_id"] for r in fake.requests_to(f"{token}/sendMessage") if r.body}
        assert len(tried) < UPDATES, "every reply had been tried before the kill: kill earlier"

        # --- Telegram recovers, the server restarts, Telegram delivers every update again ------------
        fake.unscript()
        server.start()
        for update in updates.values():
            assert fake.deliver(token, update).status_code == 200

        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while {int(sent["chat_id"]) for sent in list(fake.sent)} != set(chats):
            if time.monotonic() > deadline:
                missing = set(chats) - {int(sent["chat_id"]) for sent in list(fake.sent)}
                raise AssertionError(f"no reply after {SETTLE_TIMEOUT_S:.0f} s for {sorted(missing)[:5]}; "
                                     f"deliveries: {all_deliveries(api)[:5]}\n{server.output()[-3000:]}")
            time.sleep(0.2)
        settle_s = SETTLE_TIMEOUT_S - (deadline - time.monotonic())
        api.wait_until_idle()

        replies = collections.Counter(int(sent["chat_id"]) for sent in fake.sent)
        assert replies == {chat: 1 for chat in chats}, "a chat got no reply or more than one"
        assert {int(s["chat_id"]): s["text"] for s in fake.sent} == {
            chat: f"Answer to {chat}: question of {chat}" for chat in chats}
        deliveries = all_deliveries(api)
        assert len(deliveries) == UPDATES and {d["status"] for d in deliveries} == {"sent"}
        instances = api.call("process.list", per_page=100)
        assert instances["total"] == UPDATES
        assert {item["status"] for item in instances["items"]} == {"completed"}
        for instance in instances["items"]:
            variables = api.call("process.status", instance_id=instance["instance_id"])["variables"]
            assert variables["message_text"] == f"question of {variables['chat_id']}"
            messages = api.call("conversation.messages", binding_id=variables["binding_id"])["items"]
            assert [m["direction"] for m in messages] == ["out", "in"]        # newest first
        print(f"\n[{backend}] {UPDATES} updates taken; at the kill {len(tried)} chats' replies had been tried "
              f"(all failing); after the restart and the redelivery every chat had its one reply in {settle_s:.1f} s")
    finally:
        server.stop()
        fake.stop()
