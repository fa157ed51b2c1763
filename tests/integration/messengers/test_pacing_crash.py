"""Issue 28's crash proof for pacing: a server ``kill -9`` in the middle of a paced burst loses no
reply, doubles none, keeps each chat's order, and stays within Telegram's limits after the restart.

Each backend gets its own database, server and fake Bot API, which enforces Telegram's limits (429
beyond them). Ten chats get five operator replies each: 50 replies, queued at once, paced at one a
second per chat. Once a third of them went out, the fake holds every further sendMessage (as a slow
Telegram would); when every reply it took is recorded as sent by Baton, the server gets SIGKILL with
paced replies waiting for their slots, parked behind their chat's head, and on the wire (held). The
calls on the wire were cut short, so Telegram never took them; the fake lets go, the server starts
again on the same database, and the burst finishes.

Why the wait for "recorded": a reply the messenger took whose answer Baton had not recorded when it
died is sent again after the restart (delivery is at least once, and no messenger offers an
idempotency key); the test closes that window so that what it proves is Baton's own state: the slots
and queues survive, nothing is lost, nothing Baton knew it sent goes twice.
"""
from __future__ import annotations

import collections
import uuid

import pytest

from tests.conftest import BACKENDS
from tests.fakes.telegram import FakeTelegram
from tests.harness import BatonServer, bpmn, eventually
from tests.integration.messengers.helpers import new_chat_id
from tests.integration.test_chat_crash import all_deliveries

CHATS, REPLIES = 10, 5
SETTLE_TIMEOUT_S = 120.0


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_9_during_a_paced_burst_loses_and_doubles_nothing_and_keeps_order(backend, own_database, tmp_path):
    fake = FakeTelegram().start()
    limiter = fake.enforce_limits()
    server = BatonServer(own_database, tmp_path, BATON_JOB_LEASE_S="2", BATON_DELIVERY_RETRY_SCALE="0.01",
                         BATON_TELEGRAM_API_URL=fake.api_url)
    try:
        server.start()
        api = server.api(server.create_tenant(f"pace-crash-{uuid.uuid4().hex[:6]}"))
        token = fake.add_bot("Paced Bot")
        channel = api.call("channel.create", type="telegram", name=f"tg-{uuid.uuid4().hex[:6]}",
                           settings={"bot_token": token})
        api.deploy(bpmn("chat_operator.bpmn").replace('value="webchat"', 'value="telegram"')
                   .replace("__CHANNEL__", channel["name"]), code=f"pace-crash-{uuid.uuid4().hex[:6]}")
        chats = [new_chat_id() for _ in range(CHATS)]
        for chat in chats:
            assert fake.deliver(token, fake.text_update(chat, "hi")).status_code == 200
        bindings = eventually(lambda: (lambda found: found if len(found) == CHATS else None)(
            {int(c["chat_id"]): c["binding_id"] for c in api.call("conversation.list", per_page=100)["items"]}),
            30, "the conversations", every_s=0.05)

        # --- the burst: 50 replies queued at once, in order per chat ---------------------------------
        expected = {chat: [f"reply {n} to {chat}" for n in range(REPLIES)] for chat in chats}
        calls = [{"jsonrpc": "2.0", "id": f"{chat}-{n}", "method": "conversation.send",
                  "params": {"binding_id": bindings[chat], "text": expected[chat][n]}}
                 for n in range(REPLIES) for chat in chats]
        answers = api.post(calls).json()
        assert all("result" in answer for answer in answers), answers[:3]

        # --- a third went out; hold the rest on the wire; kill once Baton recorded all it sent --------
        eventually(lambda: len(fake.sent) >= CHATS * REPLIES // 3, 60, "a third of the burst", every_s=0.05)
        fake.hold()
        eventually(lambda: fake.held >= 1, 30, "a reply on the wire", every_s=0.05)
        taken = len(fake.sent)
        eventually(lambda: sum(d["status"] == "sent" for d in all_deliveries(api)) == taken, 30,
              "Baton to record every reply Telegram took", every_s=0.05)
        server.kill()
        fake.release()
        eventually(lambda: fake.dropped >= 1, 10, "the cut calls to be dropped", every_s=0.05)
        assert len(fake.sent) == taken, "a call cut short by the kill was taken"
        assert taken < CHATS * REPLIES, "the burst had finished before the kill: kill earlier"

        # --- the restart finishes the burst ----------------------------------------------------------
        server.start()
        eventually(lambda: len(fake.sent) >= CHATS * REPLIES, SETTLE_TIMEOUT_S, "every reply", every_s=0.05)
        api.wait_until_idle()
        received = collections.defaultdict(list)
        for sent in fake.sent:
            received[int(sent["chat_id"])].append(sent["text"])
        assert dict(received) == expected, "a reply was lost, doubled or out of order"
        assert limiter.refused == 0, "Telegram's limits were exceeded"
        assert {d["status"] for d in all_deliveries(api)} == {"sent"}
        print(f"\n[{backend}] {taken} of {CHATS * REPLIES} replies sent before the kill, {fake.dropped} cut "
              f"on the wire; after the restart every chat had its {REPLIES} replies once, in order, no 429")
    finally:
        server.stop()
        fake.stop()
