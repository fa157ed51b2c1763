"""Pacing against fakes that enforce each messenger's published limits (and answer 429, 130429,
131056 or Viber's status 12 beyond them): Baton's replies stay within them with no refusal, a chat's
replies keep their order, and a messenger's "slow down" holds the whole bot. Timings are ratios to
the configured intervals (the server runs with the documented defaults), never absolute times."""
from __future__ import annotations

import contextlib

from tests.fakes.telegram import error as telegram_error
from tests.integration.messengers.helpers import deliveries_of, eventually, new_chat_id, settled_deliveries
from tests.integration.messengers.test_telegram_chats import Bot
from tests.integration.messengers.test_viber import Account, new_user
from tests.integration.messengers.test_whatsapp import Number, new_wa_id

TG_PER_BOT, TG_PER_CHAT, TG_GROUP_INTERVAL = 30.0, 1.0, 3.0     # the defaults: docs/operations.md


@contextlib.contextmanager
def limited(fake, **limits):
    limiter = fake.enforce_limits(**limits)
    try:
        yield limiter
    finally:
        fake.limiter = None


def times_of(fake, predicate) -> list[float]:
    return [at for sent, at in zip(list(fake.sent), list(fake.sent_times)) if predicate(sent)]


def test_one_chats_replies_go_one_per_second_in_order_with_no_429(idle, fakes):
    mapi, fake = idle, fakes.telegram
    bot = Bot(mapi, fake, "chat_operator.bpmn")
    chat = new_chat_id()
    bot.say(chat, "hi")
    binding = bot.conversation(chat)["binding_id"]
    with limited(fake) as limiter:
        for number in range(5):
            mapi.call("conversation.send", binding_id=binding, text=f"part {number}")
        assert bot.texts(chat, 5) == [f"part {number}" for number in range(5)]
        times = times_of(fake, lambda s: s["token"] == bot.token and str(s["chat_id"]) == str(chat))
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    assert min(gaps) / TG_PER_CHAT >= 0.9, gaps
    assert limiter.refused == 0


def test_a_burst_to_many_chats_keeps_to_the_bots_rate(idle, fakes):
    mapi, fake = idle, fakes.telegram
    bot = Bot(mapi, fake, "chat_operator.bpmn")
    chats = [new_chat_id() for _ in range(45)]
    for chat in chats:
        bot.say(chat, "hi")
    bindings = eventually(lambda: {c["chat_id"]: c["binding_id"] for c in bot.api.call(
        "conversation.list", per_page=100)["items"] if c["config_id"] == bot.config_id},
        lambda found: len(found) == len(chats))
    with limited(fake) as limiter:
        mapi.post([{"jsonrpc": "2.0", "id": index, "method": "conversation.send",
                    "params": {"binding_id": binding, "text": f"news for {chat}"}}
                   for index, (chat, binding) in enumerate(bindings.items())])
        settled_deliveries(mapi, bot.config_id, len(chats), timeout=60)
        times = sorted(times_of(fake, lambda s: s["token"] == bot.token))
    span = times[-1] - times[0]
    assert span / ((len(chats) - 1) / TG_PER_BOT) >= 0.9, span        # no faster than the bot's rate
    assert span / ((len(chats) - 1) / TG_PER_BOT) <= 4.0, span         # and not much slower
    assert limiter.refused == 0


def test_a_429_with_retry_after_holds_the_whole_bot(idle, fakes):
    mapi, fake = idle, fakes.telegram
    bot = Bot(mapi, fake, "chat_operator.bpmn")
    first, others = new_chat_id(), [new_chat_id() for _ in range(3)]
    for chat in (first, *others):
        bot.say(chat, "hi")
    bindings = {chat: bot.conversation(chat)["binding_id"] for chat in (first, *others)}
    fake.script(telegram_error(429, "Too Many Requests: retry after 2", retry_after=2),
                path_endswith=f"{bot.token}/sendMessage")
    mapi.call("conversation.send", binding_id=bindings[first], text="the one refused first")
    refused_at = fake.wait_for(f"{bot.token}/sendMessage", 1)[0].at
    eventually(lambda: deliveries_of(mapi, bot.config_id), lambda found: found and found[0]["last_error"])  # recorded
    for chat in others:
        mapi.call("conversation.send", binding_id=bindings[chat], text="after the hold")
    settled_deliveries(mapi, bot.config_id, 4, timeout=30)
    times = times_of(fake, lambda s: s["token"] == bot.token)
    assert len(times) == 4
    assert min(at - refused_at for at in times) / 2.0 >= 0.9           # nobody went during the 2 s hold


def test_a_group_gets_at_most_20_messages_a_minute(idle, fakes):
    mapi, fake = idle, fakes.telegram
    bot = Bot(mapi, fake, "chat_operator.bpmn")
    group = -new_chat_id()
    bot.say(group, "hi from the group")
    binding = bot.conversation(group)["binding_id"]
    with limited(fake) as limiter:
        for number in range(2):
            mapi.call("conversation.send", binding_id=binding, text=f"to the group {number}")
        bot.texts(group, 2, timeout=30)
        times = times_of(fake, lambda s: s["token"] == bot.token and str(s["chat_id"]) == str(group))
    assert (times[1] - times[0]) / TG_GROUP_INTERVAL >= 0.9
    assert limiter.refused == 0


def test_whatsapps_pair_rate_holds_only_that_chat(idle, fakes):
    mapi, fake = idle, fakes.whatsapp
    number = Number(mapi, fake, "chat_operator.bpmn")
    customers = [new_wa_id() for _ in range(2)]
    for customer in customers:
        number.notify(messages=[fake.text_message(customer, "hi")])
    bindings = [number.conversation(customer)["binding_id"] for customer in customers]
    with limited(fake) as limiter:
        for index in range(3):
            for binding in bindings:
                mapi.call("conversation.send", binding_id=binding, text=f"update {index}")
        for customer in customers:
            assert [m["text"]["body"] for m in number.texts(customer, 3)] == [f"update {i}" for i in range(3)]
    assert limiter.refused == 0


def test_vibers_status_12_is_waited_for_then_sent(idle, fakes):
    mapi, fake = idle, fakes.viber
    account = Account(mapi, fake, "chat_operator.bpmn")
    user = new_user()
    account.send(fake.message_event(user, "hi"))
    binding = account.conversation(user)["binding_id"]
    fake.fail_next(12, "tooManyRequests")
    mapi.call("conversation.send", binding_id=binding, text="after the rate control")
    [sent] = settled_deliveries(mapi, account.config_id, 1, timeout=30)
    assert (sent["status"], sent["attempts"]) == ("sent", 2)
    assert account.texts(user, 1) == ["after the rate control"]
