"""Issue 28's crash proof for button presses: a server ``kill -9`` while the answers to pressed
buttons are failing loses no answer and doubles none, and a press is taken at most once.

A process asks each chat for a size (an inline keyboard). Every chat presses a size (taken: the
process asks for a colour) and, a moment later, a button on a message that is not the current keyboard
(refused with a notice). The fake answers every answerCallbackQuery with 502 meanwhile; after a few
failed attempts the server gets SIGKILL, the fake recovers, the server starts again on the same
database and Telegram delivers every press once more. Then every press has exactly one answer (the
refused ones with the notice), and every chat was asked for the colour exactly once.

Before the kill the fake holds every further sendMessage and the test waits until Baton recorded
each one it took: a message the messenger took whose answer Baton had not recorded when it died is
sent again after the restart (delivery is at least once; no messenger takes an idempotency key), as
in test_pacing_crash. Closing that window keeps what is proved Baton's own state.
"""
from __future__ import annotations

import collections
import time
import uuid

import pytest

from engine.chat.button_presses import OLD_BUTTON
from tests.conftest import BACKENDS
from tests.fakes.server import Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import BatonServer, bpmn
from tests.integration.messengers.helpers import new_chat_id
from tests.integration.test_chat_crash import all_deliveries

CHATS = 10
FAILING_ANSWERS_BEFORE_KILL = 3
SETTLE_TIMEOUT_S = 120.0


def wait_until(check, what: str, timeout: float = SETTLE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_9_while_presses_are_answered_gives_each_press_one_answer(backend, own_database, tmp_path):
    fake = FakeTelegram().start()
    server = BatonServer(own_database, tmp_path, BATON_JOB_LEASE_S="2", BATON_DELIVERY_RETRY_SCALE="0.01",
                         BATON_TELEGRAM_API_URL=fake.api_url)
    try:
        server.start()
        api = server.api(server.create_tenant(f"tg-press-{uuid.uuid4().hex[:6]}"))
        token = fake.add_bot("Press Bot")
        channel = api.call("channel.create", type="telegram", name=f"tg-{uuid.uuid4().hex[:6]}",
                           settings={"bot_token": token})
        xml = bpmn("chat_two_questions.bpmn").replace('value="webchat"', 'value="telegram"')
        api.deploy(xml.replace("__CHANNEL__", channel["name"]), code=f"tg-press-{uuid.uuid4().hex[:6]}")
        chats = [new_chat_id() for _ in range(CHATS)]
        for chat in chats:
            assert fake.deliver(token, fake.text_update(chat, "a shirt, please")).status_code == 200

        def sent_to(chat: int) -> list[dict]:
            return [s for s in list(fake.sent) if str(s["chat_id"]) == str(chat)]

        wait_until(lambda: all(sent_to(chat) for chat in chats), "every chat asked for its size")
        questions = {chat: sent_to(chat)[0] for chat in chats}

        # --- every answer fails while the presses are taken; kill -9 once a few answers failed --------
        fake.script(Reply(502, b"<html>Bad Gateway</html>"), times=10_000, path_endswith=f"{token}/answerCallbackQuery")
        presses = []
        for chat in chats:
            keyboard = [row[0] for row in questions[chat]["reply_markup"]["inline_keyboard"]]
            presses.append(fake.button_update(chat, "l", keyboard, message_id=questions[chat]["message_id"]))
            presses.append(fake.button_update(chat, "s", keyboard, message_id=questions[chat]["message_id"] + 10**6))
        for press in presses:
            assert fake.deliver(token, press).status_code == 200
        fake.wait_for(f"{token}/answerCallbackQuery", FAILING_ANSWERS_BEFORE_KILL, timeout=30)
        fake.hold()
        wait_until(lambda: sum(d["status"] == "sent" for d in all_deliveries(api)) == len(fake.sent),
                   "Baton to record every message Telegram took", timeout=30)
        server.kill()
        fake.release()
        assert fake.answered == [], "an answer went out before the kill"

        # --- Telegram recovers, the server restarts, Telegram delivers every press again ---------------
        fake.unscript()
        server.start()
        for press in presses:
            assert fake.deliver(token, press).status_code == 200
        wanted = {press["callback_query"]["id"] for press in presses}
        wait_until(lambda: {a["callback_query_id"] for a in list(fake.answered)} == wanted,
                   f"every press answered; answered {len(fake.answered)} of {len(wanted)}")
        wait_until(lambda: all(len(sent_to(chat)) >= 2 for chat in chats), "every chat asked for its colour")
        api.wait_until_idle()

        answers = collections.Counter(a["callback_query_id"] for a in fake.answered)
        assert answers == {query_id: 1 for query_id in wanted}, "a press got no answer or more than one"
        notices = {a["callback_query_id"]: a.get("text") for a in fake.answered}
        for taken, refused in zip(presses[::2], presses[1::2]):
            assert notices[taken["callback_query"]["id"]] is None
            assert notices[refused["callback_query"]["id"]] == OLD_BUTTON
        assert {chat: [s["text"] for s in sent_to(chat)] for chat in chats} == {
            chat: ["Which size?", "Which colour?"] for chat in chats}
        print(f"\n[{backend}] {len(presses)} presses of {CHATS} chats; after the kill and the redelivery each "
              "was answered once and each chat was asked for its colour once")
    finally:
        server.stop()
        fake.stop()
