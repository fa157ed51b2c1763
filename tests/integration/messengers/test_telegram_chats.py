"""Chatting through Telegram, against the fake Bot API: updates verified, deduplicated and routed like
web-chat messages; replies sent in order as sendMessage calls, buttons both ways, long texts split;
each of Telegram's errors with the right outcome; the AI step and an operator through Telegram."""
from __future__ import annotations

import pytest
import requests

from tests.fakes.telegram import error as telegram_error
from tests.harness import RpcError
from tests.integration.messengers.helpers import (conversations_of, deliveries_of, deploy_on, eventually,
                                                  messages_of, new_chat_id, new_name, settled_deliveries)


class Bot:
    """One Telegram channel of the tenant, its bot at the fake, and what the bot sent to each chat."""

    def __init__(self, api, fake, fixture: str | None = "chat_reply.bpmn", **placeholders: str):
        self.api, self.fake = api, fake
        self.token = fake.add_bot("Acme Support")
        self.channel = api.call("channel.create", type="telegram", name=new_name("tg"),
                                settings={"bot_token": self.token})
        self.config_id = self.channel["config_id"]
        if fixture:
            deploy_on(api, fixture, self.channel, **placeholders)

    def send(self, update: dict) -> requests.Response:
        answer = self.fake.deliver(self.token, update)
        assert answer.status_code == 200, answer.text
        return answer

    def say(self, chat: int, text: str) -> requests.Response:
        return self.send(self.fake.text_update(chat, text))

    def sent(self, chat: int) -> list[dict]:
        return [s for s in list(self.fake.sent) if s["token"] == self.token and str(s["chat_id"]) == str(chat)]

    def texts(self, chat: int, count: int, timeout: float = 20.0) -> list[str]:
        return [s["text"] for s in eventually(lambda: self.sent(chat), lambda found: len(found) >= count, timeout)]

    def calls(self, method: str) -> list:
        return [r for r in list(self.fake.requests) if r.path == f"/bot{self.token}/{method}"]

    def conversation(self, chat: int) -> dict:
        [found] = eventually(lambda: [c for c in conversations_of(self.api, self.config_id)
                                      if c["chat_id"] == str(chat)], lambda found: len(found) == 1)
        return found


def test_a_message_starts_the_process_the_reply_goes_back_and_the_next_message_reaches_it(mapi, fakes):
    bot = Bot(mapi, fakes.telegram)
    chat = new_chat_id()
    bot.say(chat, "Where is my parcel?")
    assert bot.texts(chat, 1) == ["Hello Ann! You wrote: Where is my parcel?"]
    conversation = bot.conversation(chat)
    assert (conversation["channel"], conversation["external_user_id"], conversation["external_username"]) == (
        "telegram", str(chat), "Ann")
    variables = mapi.call("process.status", instance_id=conversation["instance_id"])["variables"]
    assert {k: variables[k] for k in ("message_text", "external_user_id", "external_username", "channel",
                                      "chat_id", "message_type", "attachments", "button_id")} == {
        "message_text": "Where is my parcel?", "external_user_id": str(chat), "external_username": "Ann",
        "channel": "telegram", "chat_id": str(chat), "message_type": "text", "attachments": [], "button_id": None}

    bot.say(chat, "It is order 42")
    assert bot.texts(chat, 2)[1] == "Thanks, noted: It is order 42"
    assert mapi.wait_for(conversation["instance_id"])["status"] == "completed"
    assert "parse_mode" not in bot.sent(chat)[0]                     # customer text is never markup
    # (the fake has the reply a moment before Baton has recorded it as sent)
    page = eventually(lambda: mapi.call("conversation.messages", binding_id=conversation["binding_id"]),
                      lambda found: all(m["delivery"] != "queued" for m in found["items"]))
    assert (page["channel"], page["config_id"], page["chat_id"]) == ("telegram", bot.config_id, str(chat))
    assert [(m["direction"], m["delivery"]) for m in reversed(page["items"])] == [
        ("in", None), ("out", "sent"), ("in", None), ("out", "sent")]


def test_a_missing_wrong_or_unknown_secret_token_is_401_and_starts_nothing(mapi, fakes, messenger_server):
    bot = Bot(mapi, fakes.telegram)
    hook = fakes.telegram.webhooks[bot.token]
    key = hook["secret_token"].partition("_")[0]
    for secret in (None, hook["secret_token"] + "x", f"{key}_{'A' * 43}", "0123456789abcdef_" + "B" * 43, "x" * 300):
        headers = {} if secret is None else {"X-Telegram-Bot-Api-Secret-Token": secret}
        answer = requests.post(f"{messenger_server.base_url}/webhooks/telegram", headers=headers, timeout=10,
                               json=fakes.telegram.text_update(new_chat_id(), "let me in"))
        assert answer.status_code == 401, secret
        assert answer.json() == {"error": {"code": "unauthorized", "message": "The call could not be verified."}}
    mapi.wait_until_idle()
    assert conversations_of(mapi, bot.config_id) == [] and bot.calls("sendMessage") == []


def test_a_retried_update_is_acknowledged_and_taken_once(mapi, fakes):
    bot = Bot(mapi, fakes.telegram)
    chat = new_chat_id()
    update = fakes.telegram.text_update(chat, "only once")
    for _ in range(3):
        bot.send(update)
    bot.texts(chat, 1)
    mapi.wait_until_idle()
    assert len(bot.sent(chat)) == 1
    assert [m["text"] for m in messages_of(mapi, bot.conversation(chat)["binding_id"])] == [
        "only once", "Hello Ann! You wrote: only once"]


def test_photos_locations_and_the_unknown_arrive_with_their_type_and_attachments(mapi, fakes):
    fake = fakes.telegram
    bot = Bot(mapi, fake, "chat_collect.bpmn")
    chat = new_chat_id()
    photo = [{"file_id": "small", "file_unique_id": "s", "width": 90, "height": 60, "file_size": 900},
             {"file_id": "large", "file_unique_id": "l", "width": 1280, "height": 853, "file_size": 91000}]
    bot.send(fake.update(message=fake.message(chat, photo=photo, caption="the broken lid")))
    conversation = bot.conversation(chat)
    variables = mapi.call("process.status", instance_id=conversation["instance_id"])["variables"]
    assert (variables["message_text"], variables["message_type"]) == ("the broken lid", "photo")
    [attachment] = variables["attachments"]
    assert len(attachment.pop("attachment_id")) == 32                     # Baton's id: GET /v1/media/...
    assert attachment == {"type": "photo", "file_id": "large", "size": 91000,
                          "file_unique_id": "l", "width": 1280, "height": 853}
    bot.send(fake.update(message=fake.message(chat, location={"latitude": 52.52, "longitude": 13.405})))
    bot.send(fake.update(message=fake.message(chat, dice={"emoji": "🎲", "value": 3})))
    messages = eventually(lambda: messages_of(mapi, conversation["binding_id"]),
                          lambda found: len([m for m in found if m["direction"] == "in"]) == 3)
    received = [m for m in messages if m["direction"] == "in"]
    assert [(m["text"], m.get("message_type")) for m in received] == [
        ("the broken lid", "photo"), ("", "location"), ("", "unsupported")]
    assert received[1]["attachments"] == [{"type": "location", "latitude": 52.52, "longitude": 13.405}]


def test_buttons_go_out_as_an_inline_keyboard_and_a_press_comes_back_as_a_message(mapi, fakes):
    fake = fakes.telegram
    bot = Bot(mapi, fake, "chat_buttons.bpmn", buttons="yes:Yes please, no:No thanks")
    chat = new_chat_id()
    bot.say(chat, "my order arrived")
    bot.texts(chat, 1)
    binding_id = bot.conversation(chat)["binding_id"]
    [question] = bot.sent(chat)
    keyboard = question["reply_markup"]["inline_keyboard"]
    assert keyboard == [[{"text": "Yes please", "callback_data": "yes"}], [{"text": "No thanks", "callback_data": "no"}]]
    press = fake.button_update(chat, "no", keyboard=[row[0] for row in keyboard], message_id=question["message_id"])
    bot.send(press)
    assert bot.texts(chat, 2)[1] == "You chose no (No thanks), a button."
    answered = eventually(lambda: bot.calls("answerCallbackQuery"), lambda found: len(found) == 1)
    assert answered[0].json() == {"callback_query_id": press["callback_query"]["id"]}
    received = [m for m in messages_of(mapi, binding_id) if m["direction"] == "in"]
    assert (received[-1]["text"], received[-1]["message_type"], received[-1]["button_id"]) == (
        "No thanks", "button", "no")


def test_a_long_answer_is_sent_as_several_messages_in_order(mapi, fakes):
    bot = Bot(mapi, fakes.telegram, "chat_long_answer.bpmn")
    chat = new_chat_id()
    words = " ".join(f"w{i:04d}" for i in range(500))            # 2,999 characters; the answer 8,999
    bot.say(chat, words)
    parts = bot.texts(chat, 3)
    mapi.wait_until_idle()
    assert len(bot.sent(chat)) == 3 and all(len(part) <= 4096 for part in parts)
    assert " ".join(parts).split() == (" ".join([words] * 3)).split()
    deliveries = deliveries_of(mapi, bot.config_id)
    assert [d["url"] for d in deliveries] == ["telegram:sendMessage"] * 3
    assert [d["status"] for d in deliveries] == ["sent"] * 3


def test_telegrams_errors_decide_wait_retry_or_dead_at_once(idle, fakes, messenger_server):
    fake, mapi = fakes.telegram, idle
    bot = Bot(mapi, fake)
    waited, retried, blocked, unknown = (new_chat_id() for _ in range(4))
    fake.block(blocked)
    fake.forget_chat(unknown)
    fake.script(telegram_error(429, "Too Many Requests: retry after 1", retry_after=1),
                path_endswith=f"{bot.token}/sendMessage")
    bot.say(waited, "rate limited")
    bot.texts(waited, 1)
    limited, accepted = [r for r in bot.calls("sendMessage") if r.json()["chat_id"] == str(waited)]
    assert accepted.at - limited.at >= 0.95                         # retry_after honoured
    fake.script(telegram_error(502, "Bad Gateway"), times=2, path_endswith=f"{bot.token}/sendMessage")
    bot.say(retried, "flaky")
    bot.texts(retried, 1)
    bot.say(blocked, "then blocked")
    settled_deliveries(mapi, bot.config_id, 3)  # dead before the next chat speaks: its error is not the last
    bot.say(unknown, "gone")
    deliveries = settled_deliveries(mapi, bot.config_id, 4)
    by_outcome = {d["status"]: d for d in deliveries}
    assert [(d["status"], d["attempts"]) for d in deliveries] == [("sent", 2), ("sent", 3), ("dead", 1), ("dead", 1)]
    assert deliveries[2]["last_error"] == "Telegram refused it for good: Forbidden: bot was blocked by the user"
    assert deliveries[3]["last_error"] == "Telegram refused it for good: Bad Request: chat not found"
    assert by_outcome["sent"]["external_id"]
    shown = mapi.call("channel.get", config_id=bot.config_id)
    assert "chat not found" in shown["last_error"] and shown["last_error_at"]
    log = messenger_server.output()
    assert f"delivery {deliveries[2]['delivery_id']} " in log and bot.token not in log   # logged, never the token


def test_a_customer_who_blocks_the_bot_gets_no_more_calls_until_unblocking(mapi, fakes):
    fake = fakes.telegram
    bot = Bot(mapi, fake, "chat_operator.bpmn")
    chat = new_chat_id()
    bot.say(chat, "hello")
    binding = bot.conversation(chat)["binding_id"]
    bot.send(fake.blocked_update(chat, "kicked"))
    mapi.call("conversation.send", binding_id=binding, text="Are you still there?")
    [dead] = settled_deliveries(mapi, bot.config_id, 1)
    assert (dead["status"], dead["attempts"]) == ("dead", 0)
    assert dead["last_error"] == "The customer cannot be reached: the user blocked the bot."
    assert bot.sent(chat) == []
    bot.send(fake.blocked_update(chat, "member"))
    mapi.call("conversation.send", binding_id=binding, text="Welcome back")
    assert bot.texts(chat, 1) == ["Welcome back"]


def test_a_message_no_process_is_bound_to_is_acknowledged_and_shown_as_the_channels_error(mapi, fakes):
    bot = Bot(mapi, fakes.telegram, fixture=None)
    bot.say(new_chat_id(), "anyone?")
    shown = mapi.call("channel.get", config_id=bot.config_id)
    assert shown["last_error"].startswith(f"No process is bound to channel {bot.config_id}")
    assert conversations_of(mapi, bot.config_id) == []


def test_buttons_telegram_cannot_carry_are_refused_at_deploy(mapi, fakes):
    bot = Bot(mapi, fakes.telegram, fixture=None)
    with pytest.raises(RpcError) as refused:
        deploy_on(mapi, "chat_buttons.bpmn", bot.channel, buttons=f"{'x' * 65}:Too long an id")
    assert refused.value.reason == "invalid_params"
    [refusal] = refused.value.data["errors"]
    assert refusal["element_id"] == "ask" and "64 bytes" in refusal["message"]


def test_the_ai_step_answers_through_telegram_then_hands_over_to_an_operator(mapi, fakes):
    bot = Bot(mapi, fakes.telegram, "chat_ai.bpmn", max_turns="10", model="")
    chat = new_chat_id()
    bot.say(chat, "Hi, where is my order?")
    assert bot.texts(chat, 1)[0].endswith(": Hi, where is my order?")
    bot.say(chat, "Can I talk to a person please?")
    assert bot.texts(chat, 2)[1] == "Let me find a colleague for you."
    conversation = bot.conversation(chat)
    [task] = eventually(lambda: mapi.call("task.list", instance_id=conversation["instance_id"],
                                          status="in_progress")["items"], bool)
    assert task["variables"]["ai_outcome"] == "handoff" and task["variables"]["channel"] == "telegram"
    mapi.call("conversation.send", binding_id=conversation["binding_id"], text="Hi, I'm Anna from Acme.")
    assert bot.texts(chat, 3)[2] == "Hi, I'm Anna from Acme."
    mapi.call("task.complete", task_id=task["task_id"], result={})
    assert mapi.wait_for(conversation["instance_id"])["status"] == "completed"
    assert conversations_of(mapi, bot.config_id) == []
    assert [m["author"] for m in messages_of(mapi, conversation["binding_id"])] == [
        "customer", "ai", "customer", "ai", "operator"]
