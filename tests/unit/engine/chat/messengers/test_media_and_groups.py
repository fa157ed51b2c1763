"""Issue 28's protocol parts, each messenger against its fake: files in replies (the caption where it
fits, else the file first), inbound files fetched the messenger's way, Telegram groups, service
updates and presses with the message they were on, Viber's welcome answer and keyboards within its
limits, optional settings."""
from __future__ import annotations

import json

import pytest

from engine.chat.messengers.items import IGNORED, MOVED, REACHABLE, UNREACHABLE, Attachment, InboundMessage
from engine.chat.messengers.sending import Button, Media
from engine.chat.messengers.telegram import updates
from engine.chat.messengers.telegram.bot_api import Telegram
from engine.chat.messengers.viber import callbacks
from engine.chat.messengers.viber.bot_api import REQUEST_MAX_BYTES, Viber, keyboard, request_size
from engine.chat.messengers.whatsapp.cloud_api import WhatsApp
from engine.errors import InvalidParamsError, OutboundError
from tests.fakes.server import encode

telegram, viber, whatsapp = Telegram(), Viber(), WhatsApp()
PHOTO = Media("image", "https://files.example.com/a/lid%20photo.jpg")
PDF = Media("document", "https://files.example.com/invoices/inv-7.pdf?sig=1", size=4096)


# --- files in replies --------------------------------------------------------------------------------

def test_telegram_sends_a_photo_with_its_caption_and_buttons_or_the_text_after_it():
    [photo] = telegram.calls("42", "Your parcel", [Button("ok", "OK")], PHOTO)
    assert (photo.method, photo.payload["photo"], photo.payload["caption"]) == ("sendPhoto", PHOTO.url, "Your parcel")
    assert photo.payload["reply_markup"] == {"inline_keyboard": [[{"text": "OK", "callback_data": "ok"}]]}
    document, text = telegram.calls("42", "x" * 1025, [Button("ok", "OK")], PDF)
    assert (document.method, "caption" in document.payload, "reply_markup" in document.payload) == (
        "sendDocument", False, False)
    assert (text.method, text.payload["text"], "reply_markup" in text.payload) == ("sendMessage", "x" * 1025, True)


def test_viber_sends_a_picture_with_its_description_and_a_file_with_size_and_name_then_the_text():
    [picture] = viber.calls("u1", "Look", (), PHOTO)
    assert {k: picture.payload[k] for k in ("type", "media", "text")} == {"type": "picture", "media": PHOTO.url,
                                                                         "text": "Look"}
    file, text = viber.calls("u1", "Your invoice", (), PDF)
    assert {k: file.payload[k] for k in ("type", "media", "size", "file_name")} == {
        "type": "file", "media": PDF.url, "size": 4096, "file_name": "inv-7.pdf"}
    assert text.payload == {"receiver": "u1", "type": "text", "text": "Your invoice"}
    with pytest.raises(InvalidParamsError) as refused:
        viber.calls("u1", "Your invoice", (), Media("document", PDF.url))
    assert refused.value.data["param"] == "attachment_size"
    assert viber.attachment_refusals("document", False) and not viber.attachment_refusals("image", False)


def test_whatsapp_sends_media_by_link_with_a_caption_unless_buttons_need_an_interactive_message():
    [image] = whatsapp.calls("491", "The photo", (), PHOTO)
    assert image.payload["type"] == "image" and image.payload["image"] == {"link": PHOTO.url, "caption": "The photo"}
    document, question = whatsapp.calls("491", "Pay now?", [Button("y", "Yes")], PDF)
    assert document.payload["document"] == {"link": PDF.url, "filename": "inv-7.pdf"}
    assert question.payload["type"] == "interactive"


def test_a_file_name_is_the_urls_last_segment_or_document():
    assert PHOTO.file_name == "lid photo.jpg"
    assert Media("document", "https://files.example.com/").file_name == "document"


# --- files customers send ------------------------------------------------------------------------------

def test_telegram_finds_a_file_with_getfile_and_refuses_a_path_outside_its_files(http, telegram_fake):
    token = telegram_fake.add_bot()
    file_id = telegram_fake.add_file(b"bytes", "documents/file_3.pdf")
    request = telegram.file_request(http, {"bot_token": token}, file_id, api_url=telegram_fake.api_url)
    assert request.url == f"{telegram_fake.api_url}/file/bot{token}/documents/file_3.pdf"
    with pytest.raises(OutboundError) as refused:
        telegram.file_request(http, {"bot_token": token}, "unknown", api_url=telegram_fake.api_url)
    assert refused.value.message == "Telegram refused the file: Bad Request: invalid file_id"
    telegram_fake.files["evil"] = ("../../etc/passwd", b"")
    with pytest.raises(OutboundError):
        telegram.file_request(http, {"bot_token": token}, "evil", api_url=telegram_fake.api_url)


def test_whatsapp_finds_a_media_url_with_the_token_and_downloads_with_it_too(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number()
    media_id = whatsapp_fake.add_media(number, b"png", "image/png")
    settings = whatsapp_fake.channel_settings(number)
    request = whatsapp.file_request(http, settings, media_id, api_url=whatsapp_fake.api_url)
    assert request.headers == {"Authorization": f"Bearer {token}"}
    assert http.request("GET", request.url, headers=request.headers).body == b"png"
    with pytest.raises(OutboundError):
        whatsapp.file_request(http, settings, "../me", api_url=whatsapp_fake.api_url)


def test_only_files_get_an_attachment_id():
    from engine.chat import media

    photo, place = media.with_ids((Attachment("photo", file_id="f"), Attachment("location")))
    assert len(photo.attachment_id) == 32 and place.attachment_id is None
    assert photo.to_dict()["attachment_id"] == photo.attachment_id


# --- Telegram groups ------------------------------------------------------------------------------------

def parse_one(update: dict):
    [item] = updates.parse(encode(update))
    return item


def test_a_group_message_is_the_groups_and_its_senders(telegram_fake):
    message = parse_one(telegram_fake.group_update(-100123, 77, "hi all", "Bob"))
    assert isinstance(message, InboundMessage)
    assert (message.chat_id, message.user_id, message.display_name) == ("-100123", "77", "Bob")
    orphan = telegram_fake.group_update(-100123, 77, "who?")
    del orphan["message"]["from"]
    assert parse_one(orphan).kind == IGNORED


@pytest.mark.parametrize("service", [{"new_chat_members": [{"id": 1}]}, {"left_chat_member": {"id": 1}},
                                     {"pinned_message": {"message_id": 3}}, {"new_chat_title": "VIP"},
                                     {"migrate_from_chat_id": -5}, {"group_chat_created": True}])
def test_service_messages_are_acknowledged_only(telegram_fake, service):
    event = parse_one(telegram_fake.group_update(-100123, 77, **service))
    assert (event.kind, event.event) == (IGNORED, next(iter(service)))


def test_a_migrated_group_moves_and_a_bot_removed_from_a_group_is_not_blocked(telegram_fake):
    moved = parse_one(telegram_fake.group_update(-5, 77, chat_type="group", migrate_to_chat_id=-100999))
    assert (moved.kind, moved.chat_id, moved.new_chat_id) == (MOVED, "-5", "-100999")
    removed = parse_one(telegram_fake.removed_from_group_update(-100999, "kicked"))
    assert (removed.kind, removed.reason) == (UNREACHABLE, "the bot was removed from the group")
    assert parse_one(telegram_fake.removed_from_group_update(-100999, "administrator")).kind == REACHABLE
    assert parse_one(telegram_fake.blocked_update(8, "kicked")).reason == "the user blocked the bot"


def test_a_press_knows_the_message_it_was_on_and_is_answered_with_a_notice_when_refused(telegram_fake):
    press = parse_one(telegram_fake.button_update(31, "keep", message_id=555, user_id=9, chat_type="supergroup"))
    assert (press.pressed_on, press.user_id, press.chat_id) == ("555", "9", "31")
    assert telegram.button_answer(press).payload == {"callback_query_id": press.callback_query_id}
    assert telegram.button_answer(press, "n" * 300).payload["text"] == "n" * 200
    gone = telegram_fake.button_update(31, "keep")
    del gone["callback_query"]["message"]
    assert parse_one(gone).pressed_on is None


# --- Viber: welcome, keyboards ----------------------------------------------------------------------------

def test_the_welcome_answers_conversation_started_with_the_context_in_its_tracking_data(viber_fake):
    [opened] = callbacks.parse(encode(viber_fake.event("conversation_started", user={"id": "u"}, context="promo")))
    settings = {"auth_token": "t" * 20, "sender_name": "Acme", "welcome_text": "Hello!\nAsk away."}
    answer = viber.answer_body(opened, settings)
    assert answer == {"sender": {"name": "Acme"}, "type": "text", "text": "Hello!\nAsk away.",
                      "tracking_data": '{"baton_context":"promo"}'}
    assert viber.answer_body(opened, {**settings, "welcome_text": None}) is None
    [reply] = callbacks.parse(encode(viber_fake.message_event("u", "hi", tracking_data=answer["tracking_data"])))
    assert reply.variables()["context"] == "promo"


def test_welcome_text_is_optional_and_checked_when_given():
    spec = viber.settings_spec
    assert spec.check({"auth_token": "t" * 20, "sender_name": "Acme"}) == {"auth_token": "t" * 20,
                                                                           "sender_name": "Acme"}
    with pytest.raises(InvalidParamsError) as refused:
        spec.check({"auth_token": "t" * 20, "sender_name": "Acme", "welcome_text": "\x00"})
    assert refused.value.data["param"] == "settings.welcome_text"


def test_keyboards_fill_at_most_24_rows_and_a_reply_over_30_kb_moves_its_text_before_the_keyboard():
    rows = {count: {b["Columns"] for b in keyboard([Button(f"b{n}", f"B{n}") for n in range(count)])["Buttons"]}
            for count in (24, 25, 48, 49, 100)}
    assert rows == {24: {6}, 25: {3}, 48: {3}, 49: {2}, 100: {1}}
    buttons = [Button(f"b{n}", "€" * 60 + f" {n}") for n in range(20)]
    text = " ".join(["€€€€€€€€€"] * 650)
    made = viber.calls("u1", text, buttons)
    assert len(made) == 2 and all(request_size(call.payload) <= REQUEST_MAX_BYTES for call in made)
    assert " ".join(call.payload["text"] for call in made) == text and "keyboard" in made[-1].payload
    assert len(json.loads(made[-1].payload["tracking_data"])["baton_buttons"]) == 20
    huge = [Button(f"b{n}", "€" * 60 + f"{n:02d}") for n in range(56)]
    assert any("30720 bytes" in refusal for refusal in viber.button_refusals(huge))
