"""Telegram groups, service updates and button presses against the fake Bot API: in a group the
conversation is the group and each message's sender is external_user_id; service messages start
nothing and a group that becomes a supergroup keeps its conversation; a bot removed from a group is
not "blocked by the user"; every callback_query is answered, a press on an earlier message's keyboard
is refused politely and reaches nothing; hostile updates change nothing and answer 200."""
from __future__ import annotations

import random

from engine.chat.button_presses import ENDED, OLD_BUTTON
from tests.integration.messengers.helpers import (conversations_of, deliveries_of, eventually, messages_of,
                                                  new_chat_id, settled_deliveries)
from tests.integration.messengers.test_telegram_chats import Bot


def new_group_id() -> int:
    return -random.randint(10**12, 10**13)


def answers(bot: Bot, count: int) -> list[dict]:
    return [r.json() for r in eventually(lambda: bot.calls("answerCallbackQuery"), lambda found: len(found) >= count)]


def test_in_a_group_the_conversation_is_the_group_and_each_sender_is_external_user_id(mapi, fakes):
    fake = fakes.telegram
    bot = Bot(mapi, fake)
    group, ann, bob = new_group_id(), new_chat_id(), new_chat_id()
    bot.send(fake.group_update(group, ann, "Our order is late", "Ann"))
    assert bot.texts(group, 1) == ["Hello Ann! You wrote: Our order is late"]
    conversation = bot.conversation(group)
    assert (conversation["chat_id"], conversation["external_user_id"]) == (str(group), str(ann))
    started = mapi.call("process.status", instance_id=conversation["instance_id"])["variables"]
    assert (started["chat_id"], started["external_user_id"], started["external_username"]) == (str(group), str(ann), "Ann")

    bot.send(fake.group_update(group, bob, "It is order 42", "Bob"))
    assert bot.texts(group, 2)[1] == "Thanks, noted: It is order 42"
    ended = mapi.wait_for(conversation["instance_id"])
    assert ended["status"] == "completed"
    assert (ended["variables"]["external_user_id"], ended["variables"]["external_username"]) == (str(bob), "Bob")
    assert {str(s["chat_id"]) for s in bot.sent(group)} == {str(group)}


def test_service_messages_start_nothing_and_a_migrated_group_keeps_its_conversation(mapi, fakes):
    fake = fakes.telegram
    bot = Bot(mapi, fake)
    group, ann = new_group_id(), new_chat_id()
    member = {"id": ann, "is_bot": False, "first_name": "Ann"}
    for service in ({"new_chat_members": [member]}, {"left_chat_member": member}, {"new_chat_title": "VIP"},
                    {"pinned_message": fake.message(ann, text="pinned")}, {"group_chat_created": True},
                    {"new_chat_photo": [{"file_id": "p", "file_unique_id": "p", "width": 1, "height": 1}]}):
        bot.send(fake.group_update(group, ann, **service))
    bot.send(fake.update(edited_message=fake.group_message(group, ann, text="edited")))
    mapi.wait_until_idle()
    assert conversations_of(mapi, bot.config_id) == [] and bot.sent(group) == []

    bot.send(fake.group_update(group, ann, "hello from the group"))
    bot.texts(group, 1)
    conversation = bot.conversation(group)
    supergroup = new_group_id()
    migrate = fake.group_update(group, ann, chat_type="group", migrate_to_chat_id=supergroup)
    bot.send(migrate)
    bot.send(migrate)                                            # a retried update: taken once
    bot.send(fake.group_update(supergroup, ann, migrate_from_chat_id=group))
    moved = bot.conversation(supergroup)
    assert (moved["binding_id"], moved["instance_id"]) == (conversation["binding_id"], conversation["instance_id"])
    bot.send(fake.group_update(supergroup, ann, "still here"))
    assert bot.texts(supergroup, 1) == ["Thanks, noted: still here"]
    assert mapi.wait_for(conversation["instance_id"])["status"] == "completed"


def test_a_bot_removed_from_a_group_is_not_blocked_by_a_user(mapi, fakes):
    fake = fakes.telegram
    bot = Bot(mapi, fake)
    group, ann = new_group_id(), new_chat_id()
    bot.send(fake.group_update(group, ann, "hi"))
    bot.texts(group, 1)
    binding_id = bot.conversation(group)["binding_id"]
    bot.send(fake.removed_from_group_update(group, "left"))
    mapi.call("conversation.send", binding_id=binding_id, text="Are you still there?")
    dead = settled_deliveries(mapi, bot.config_id, 2)[-1]
    assert dead["status"] == "dead"
    assert "the bot was removed from the group" in dead["last_error"] and "blocked" not in dead["last_error"]
    bot.send(fake.removed_from_group_update(group, "member"))         # added back: replies go out again
    mapi.call("conversation.send", binding_id=binding_id, text="Welcome back")
    assert bot.texts(group, 2)[1] == "Welcome back"


def test_every_press_is_answered_and_one_on_an_earlier_keyboard_reaches_nothing(mapi, fakes):
    fake = fakes.telegram
    bot = Bot(mapi, fake, "chat_two_questions.bpmn")
    chat = new_chat_id()
    bot.say(chat, "I want a shirt")
    [size_question] = bot.texts(chat, 1) and bot.sent(chat)
    size_keyboard = [row[0] for row in size_question["reply_markup"]["inline_keyboard"]]
    # A person presses once the message is on their screen, well after Baton recorded it sent; the
    # test does not race that record (a press before it is refused as one on an older keyboard).
    mapi.wait_until_idle()
    bot.send(fake.button_update(chat, "l", size_keyboard, message_id=size_question["message_id"]))
    colour_question = eventually(lambda: bot.sent(chat), lambda found: len(found) >= 2)[1]
    assert colour_question["text"] == "Which colour?"

    # Both size buttons again, on the message answered already: refused, nothing routed.
    for button_id in ("s", "l"):
        bot.send(fake.button_update(chat, button_id, size_keyboard, message_id=size_question["message_id"]))
    assert [a.get("text") for a in answers(bot, 3)] == [None, OLD_BUTTON, OLD_BUTTON]
    mapi.wait_until_idle()
    assert len(bot.sent(chat)) == 2
    binding_id = bot.conversation(chat)["binding_id"]
    assert [m.get("button_id") for m in messages_of(mapi, binding_id) if m["direction"] == "in"] == [None, "l"]

    colour_keyboard = [row[0] for row in colour_question["reply_markup"]["inline_keyboard"]]
    mapi.wait_until_idle()
    bot.send(fake.button_update(chat, "blue", colour_keyboard, message_id=colour_question["message_id"]))
    assert bot.texts(chat, 3)[2] == "Size l, colour blue."
    bot.send(fake.button_update(chat, "red", colour_keyboard, message_id=colour_question["message_id"]))
    assert answers(bot, 5)[4]["text"] == OLD_BUTTON
    mapi.wait_until_idle()
    assert len(bot.sent(chat)) == 3


def test_a_press_with_nothing_waiting_or_on_a_deleted_message_is_answered_and_changes_nothing(mapi, fakes):
    fake = fakes.telegram
    bot = Bot(mapi, fake, "chat_two_questions.bpmn")
    stranger = new_chat_id()
    press = fake.button_update(stranger, "s", [{"text": "Small", "callback_data": "s"}], message_id=12)
    bot.send(press)
    bot.send(press)                                             # a retried update: answered once
    assert answers(bot, 1) == [{"callback_query_id": press["callback_query"]["id"], "text": ENDED}]

    chat = new_chat_id()
    bot.say(chat, "hello")
    bot.texts(chat, 1)
    deleted = fake.button_update(chat, "s", message_id=1)
    del deleted["callback_query"]["message"]                     # Telegram no longer sends the message
    bot.send(deleted)
    assert answers(bot, 2)[1]["text"] == OLD_BUTTON
    mapi.wait_until_idle()
    assert len(bot.calls("answerCallbackQuery")) == 2
    assert [c["chat_id"] for c in conversations_of(mapi, bot.config_id)] == [str(chat)]
    assert len(bot.sent(chat)) == 1 and bot.sent(stranger) == []


def test_a_group_message_without_a_sender_changes_nothing_and_answers_200(mapi, fakes):
    fake = fakes.telegram
    bot = Bot(mapi, fake)
    group = new_group_id()
    update = fake.group_update(group, new_chat_id(), "who am I?")
    del update["message"]["from"]
    assert bot.send(update).json() == {"ok": True}
    mapi.wait_until_idle()
    assert conversations_of(mapi, bot.config_id) == [] and deliveries_of(mapi, bot.config_id) == []
