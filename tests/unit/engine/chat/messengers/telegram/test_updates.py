"""Parsing Telegram updates: every message kind, pressed buttons, membership changes, malformed bodies."""
from __future__ import annotations

import json

import pytest

from engine.chat.messengers.telegram import updates
from engine.chat.messengers.items import IGNORED, REACHABLE, UNREACHABLE, InboundEvent, InboundMessage
from engine.errors import BadRequestError
from tests.fakes.server import encode


def parse_one(update: dict):
    items = updates.parse(encode(update))
    assert len(items) == 1
    return items[0]


def test_a_text_message_becomes_one_message_with_its_update_id(telegram_fake):
    update = telegram_fake.text_update(4242, "Where is my order?", first_name="Ann")
    update["update_id"] = 777
    message = parse_one(update)
    assert isinstance(message, InboundMessage)
    assert (message.dedup_id, message.chat_id, message.user_id) == ("777", "4242", "4242")
    assert (message.text, message.message_type, message.display_name) == ("Where is my order?", "text", "Ann")
    assert message.variables() == {"message_text": "Where is my order?", "external_user_id": "4242",
                                   "external_username": "Ann", "channel": "telegram", "message_type": "text",
                                   "attachments": [], "button_id": None}


def test_a_photo_keeps_the_largest_size_and_the_caption(telegram_fake):
    sizes = [{"file_id": f"p{n}", "file_unique_id": f"u{n}", "width": w, "height": w, "file_size": w * 10}
             for n, w in ((1, 90), (3, 1280), (2, 320))]
    message = parse_one(telegram_fake.update(message=telegram_fake.message(5, photo=sizes, caption="broken")))
    assert (message.message_type, message.text) == ("photo", "broken")
    assert message.variables()["attachments"] == [
        {"type": "photo", "file_id": "p3", "size": 12800, "file_unique_id": "u3", "width": 1280, "height": 1280}]


@pytest.mark.parametrize("kind, described, expected", [
    ("document", {"file_id": "d1", "file_unique_id": "du", "file_name": "invoice.pdf", "mime_type": "application/pdf",
                  "file_size": 5000},
     {"type": "document", "file_id": "d1", "name": "invoice.pdf", "size": 5000, "mime_type": "application/pdf",
      "file_unique_id": "du"}),
    ("voice", {"file_id": "v1", "file_unique_id": "vu", "duration": 3, "mime_type": "audio/ogg", "file_size": 900},
     {"type": "voice", "file_id": "v1", "size": 900, "mime_type": "audio/ogg", "file_unique_id": "vu", "duration": 3}),
    ("video", {"file_id": "m1", "file_unique_id": "mu", "width": 640, "height": 480, "duration": 9},
     {"type": "video", "file_id": "m1", "file_unique_id": "mu", "width": 640, "height": 480, "duration": 9}),
    ("sticker", {"file_id": "s1", "file_unique_id": "su", "width": 512, "height": 512, "emoji": "👍"},
     {"type": "sticker", "file_id": "s1", "file_unique_id": "su", "width": 512, "height": 512, "emoji": "👍"}),
    ("audio", {"file_id": "a1", "file_unique_id": "au", "duration": 200, "file_name": "song.mp3"},
     {"type": "audio", "file_id": "a1", "name": "song.mp3", "file_unique_id": "au", "duration": 200}),
])
def test_files_keep_the_messengers_file_id_name_type_and_size(telegram_fake, kind, described, expected):
    message = parse_one(telegram_fake.update(message=telegram_fake.message(5, **{kind: described})))
    assert (message.message_type, message.text) == (kind, "")
    assert message.variables()["attachments"] == [expected]


def test_an_animation_is_an_animation_although_telegram_also_sends_it_as_a_document(telegram_fake):
    gif = {"file_id": "g1", "file_unique_id": "gu", "width": 1, "height": 1, "duration": 1, "file_name": "a.mp4"}
    message = parse_one(telegram_fake.update(message=telegram_fake.message(5, animation=gif, document=gif)))
    assert message.message_type == "animation"


def test_locations_venues_and_contacts_carry_their_details(telegram_fake):
    location = parse_one(telegram_fake.update(message=telegram_fake.message(
        5, location={"latitude": 52.52, "longitude": 13.4})))
    venue = parse_one(telegram_fake.update(message=telegram_fake.message(
        5, venue={"location": {"latitude": 1.5, "longitude": 2.5}, "title": "Shop", "address": "Main St 1"})))
    contact = parse_one(telegram_fake.update(message=telegram_fake.message(
        5, contact={"phone_number": "+4915112345", "first_name": "Bob", "user_id": 99})))
    assert location.variables()["attachments"] == [{"type": "location", "latitude": 52.52, "longitude": 13.4}]
    assert venue.variables()["attachments"] == [{"type": "location", "latitude": 1.5, "longitude": 2.5,
                                                  "title": "Shop", "address": "Main St 1"}]
    assert contact.variables()["attachments"] == [{"type": "contact", "phone_number": "+4915112345",
                                                    "first_name": "Bob", "user_id": 99}]
    assert [m.message_type for m in (location, venue, contact)] == ["location", "location", "contact"]


def test_a_message_baton_cannot_read_is_still_a_message_of_type_unsupported(telegram_fake):
    message = parse_one(telegram_fake.update(message=telegram_fake.message(5, poll={"id": "1", "question": "?"})))
    assert (message.message_type, message.text, message.attachments) == ("unsupported", "", ())


def test_a_pressed_button_is_its_title_with_its_id_and_the_query_to_answer(telegram_fake):
    keyboard = [{"text": "Yes, cancel it", "callback_data": "cancel"}, {"text": "No", "callback_data": "keep"}]
    update = telegram_fake.button_update(31, "cancel", keyboard)
    message = parse_one(update)
    assert (message.message_type, message.text, message.button_id) == ("button", "Yes, cancel it", "cancel")
    assert message.callback_query_id == update["callback_query"]["id"]
    assert (message.chat_id, message.dedup_id) == ("31", str(update["update_id"]))
    assert message.variables()["button_id"] == "cancel"


def test_a_button_on_a_message_too_old_to_be_included_falls_back_to_its_id(telegram_fake):
    update = telegram_fake.button_update(31, "keep")
    del update["callback_query"]["message"]
    message = parse_one(update)
    assert (message.chat_id, message.text, message.button_id) == ("31", "keep", "keep")


def test_blocking_and_unblocking_the_bot_are_events_not_messages(telegram_fake):
    blocked = parse_one(telegram_fake.blocked_update(8, "kicked"))
    unblocked = parse_one(telegram_fake.blocked_update(8, "member"))
    assert isinstance(blocked, InboundEvent)
    assert (blocked.kind, blocked.event, blocked.chat_id, blocked.reason) == (
        UNREACHABLE, "my_chat_member", "8", "the user blocked the bot")
    assert (unblocked.kind, unblocked.chat_id) == (REACHABLE, "8")


def test_edits_and_update_kinds_baton_does_not_handle_are_acknowledged_only(telegram_fake):
    edited = parse_one(telegram_fake.update(edited_message=telegram_fake.message(5, text="typo fixed")))
    poll = parse_one({"update_id": 5, "poll": {"id": "1"}})
    assert (edited.kind, edited.event, edited.chat_id) == (IGNORED, "edited_message", "5")
    assert (poll.kind, poll.event, poll.dedup_id) == (IGNORED, "poll", "5")


def test_a_message_without_a_chat_is_recorded_as_malformed_not_raised():
    item = parse_one({"update_id": 9, "message": {"message_id": 1, "text": "hi"}})
    assert (item.kind, item.event, item.dedup_id) == (IGNORED, "message", "9")
    assert item.reason == "malformed: the message has no chat id"
    absurd = parse_one({"update_id": 10, "message": {"chat": {"id": True}, "text": "hi"}})
    assert absurd.kind == IGNORED


@pytest.mark.parametrize("body, words", [
    (b"not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object, not list"),
    (b'{"update_id": NaN}', "body.update_id: NaN is not a JSON number"),
    (b'{"update_id": 1e400}', "body.update_id: number too large"),
    (b"\xff\xfe", "not valid JSON"),
    (b'{"message": {"text": "hi"}}', "no integer 'update_id'"),
    (b'{"update_id": "x1"}', "no integer 'update_id'"),
    (json.dumps({"update_id": 1, "message": [[[[[[[]]]]]]] * 1}).replace("[]", "[" * 70 + "]" * 70).encode(),
     "deeper than 64 levels"),
    (b"[" * 100_000 + b"]" * 100_000, "deeper than 64 levels"),
])
def test_malformed_bodies_are_a_clear_bad_request(body, words):
    with pytest.raises(BadRequestError) as refused:
        updates.parse(body)
    assert words in refused.value.message
    assert refused.value.http_status == 400
