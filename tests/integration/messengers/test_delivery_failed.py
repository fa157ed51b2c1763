"""A reply that becomes dead reaches the process as the message ``delivery_failed`` (variables
``delivery_error`` and ``delivery_reason``), in the transaction that made it dead: Telegram's blocked
bot, Viber's unsubscribed user, WhatsApp's failed status (131047) and its closed window; the example
process (tests/bpmn/chat_delivery_failed.bpmn) takes it on a message boundary event and falls back."""
from __future__ import annotations

from tests.fakes.whatsapp import WINDOW_CLOSED
from tests.integration.messengers.helpers import eventually, new_chat_id, settled_deliveries
from tests.integration.messengers.test_telegram_chats import Bot
from tests.integration.messengers.test_viber import Account, new_user
from tests.integration.messengers.test_whatsapp import Number, new_wa_id

FIXTURE = "chat_delivery_failed.bpmn"


def fell_back(api, instance_id: int) -> dict:
    """The instance's variables once its boundary event took ``delivery_failed``."""
    status = eventually(lambda: api.call("process.status", instance_id=instance_id),
                        lambda found: "fallback" in found["variables"] or found["status"] != "running")
    assert status["status"] == "running", status
    return status["variables"]


def test_a_blocked_telegram_bot_tells_the_process_which_falls_back(mapi, fakes):
    bot = Bot(mapi, fakes.telegram, FIXTURE)
    chat = new_chat_id()
    fakes.telegram.block(chat)
    bot.say(chat, "hi")
    conversation = bot.conversation(chat)
    variables = fell_back(mapi, conversation["instance_id"])
    assert variables["delivery_reason"] == "blocked"
    assert "blocked by the user" in variables["delivery_error"]
    assert variables["fallback"] == "operator calls: blocked"
    [dead] = settled_deliveries(mapi, bot.config_id, 1)
    assert (dead["status"], dead["attempts"]) == ("dead", 1)


def test_an_unsubscribed_viber_user_tells_the_process(mapi, fakes):
    account = Account(mapi, fakes.viber, FIXTURE)
    user = new_user()
    fakes.viber.unsubscribe(user)
    account.send(fakes.viber.message_event(user, "hi"))
    variables = fell_back(mapi, account.conversation(user)["instance_id"])
    assert variables["delivery_reason"] == "unsubscribed"
    assert "receiverNotSubscribed" in variables["delivery_error"]


def test_a_whatsapp_reply_reported_failed_later_tells_the_process_once(mapi, fakes):
    fake = fakes.whatsapp
    number = Number(mapi, fake, FIXTURE)
    customer = new_wa_id()
    number.notify(messages=[fake.text_message(customer, "hi")])
    [sent] = settled_deliveries(mapi, number.config_id, 1)
    instance_id = number.conversation(customer)["instance_id"]
    assert mapi.call("process.status", instance_id=instance_id)["variables"].get("fallback") is None
    failed = fake.status(sent["external_id"], "failed", customer, errors=[WINDOW_CLOSED])
    number.notify(statuses=[failed])
    number.notify(statuses=[failed])                                  # Meta retries: taken once
    variables = fell_back(mapi, instance_id)
    assert variables["delivery_reason"] == "window_closed"
    assert "24 hours" in variables["delivery_error"]
    mapi.wait_until_idle()
    tasks = mapi.call("task.list", instance_id=instance_id)["items"]
    assert len(tasks) == 1                                            # one fallback, not two


def test_a_failed_reply_with_nothing_waiting_for_it_changes_nothing(mapi, fakes):
    bot = Bot(mapi, fakes.telegram)                                    # chat_reply: no delivery_failed anywhere
    chat = new_chat_id()
    fakes.telegram.block(chat)
    bot.say(chat, "hi")
    instance_id = bot.conversation(chat)["instance_id"]
    settled_deliveries(mapi, bot.config_id, 1)
    mapi.wait_until_idle()
    status = mapi.call("process.status", instance_id=instance_id)
    assert status["status"] == "running" and "delivery_reason" not in status["variables"]


def test_a_telegram_group_that_removed_the_bot_tells_the_process_it_is_unreachable(mapi, fakes):
    """Not "blocked": nobody blocked anything, the group is gone for the bot (issue 28.5)."""
    from tests.fakes.server import Reply

    fake = fakes.telegram
    bot = Bot(mapi, fake, FIXTURE)
    group = -new_chat_id()
    fake.script(Reply(502, b"<html>Bad Gateway</html>"), times=1000, path_endswith=f"{bot.token}/sendMessage")
    try:
        bot.send(fake.group_update(group, new_chat_id(), "hi"))
        conversation = bot.conversation(group)
        fake.wait_for(f"{bot.token}/sendMessage", 1)
        bot.send(fake.removed_from_group_update(group, "left"))
        variables = fell_back(mapi, conversation["instance_id"])
    finally:
        fake.unscript()
    assert variables["delivery_reason"] == "unreachable"
    assert "the bot was removed from the group" in variables["delivery_error"]
