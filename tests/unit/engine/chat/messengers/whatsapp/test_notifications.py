"""Parsing WhatsApp notifications: batches in order, statuses, every message kind, broken items."""
from __future__ import annotations

import pytest

from engine.chat.messengers.whatsapp import notifications
from engine.chat.messengers.items import DELIVERY_STATUS, IGNORED, InboundEvent, InboundMessage
from engine.errors import BadRequestError
from tests.fakes.server import encode


def test_a_batch_keeps_every_entry_change_message_and_status_in_order(whatsapp_fake):
    first = whatsapp_fake.notification("111", messages=[whatsapp_fake.text_message("491", "one"),
                                                        whatsapp_fake.text_message("492", "two")],
                                       names={"491": "Ann", "492": "Bob"})
    second = whatsapp_fake.notification("222", messages=[whatsapp_fake.text_message("493", "three")],
                                        statuses=[whatsapp_fake.status("wamid.A", "delivered", "491")])
    batch = {"object": "whatsapp_business_account", "entry": first["entry"] + second["entry"]}
    batch["entry"][0]["changes"].append(second["entry"][0]["changes"][0])
    items = notifications.parse(encode(batch))
    described = [(type(i).__name__, i.account_id, getattr(i, "text", None) or getattr(i, "status", None))
                 for i in items]
    assert described == [("InboundMessage", "111", "one"), ("InboundMessage", "111", "two"),
                         ("InboundMessage", "222", "three"), ("InboundEvent", "222", "delivered"),
                         ("InboundMessage", "222", "three"), ("InboundEvent", "222", "delivered")]
    assert [i.display_name for i in items[:2]] == ["Ann", "Bob"]
    assert items[0].dedup_id.startswith("wamid.") and items[0].variables()["external_user_id"] == "491"


def test_statuses_report_on_baton_messages_with_metas_error(whatsapp_fake):
    failed = whatsapp_fake.status("wamid.B", "failed", "491", errors=[{
        "code": 131047, "title": "Re-engagement message", "message": "Re-engagement message",
        "error_data": {"details": "more than 24 hours have passed"}}])
    items = notifications.parse(encode(whatsapp_fake.notification("111", statuses=[
        whatsapp_fake.status("wamid.B", "sent", "491"), whatsapp_fake.status("wamid.B", "read", "491"), failed])))
    assert [(i.kind, i.status, i.message_id, i.dedup_id) for i in items] == [
        (DELIVERY_STATUS, "sent", "wamid.B", "wamid.B:sent"), (DELIVERY_STATUS, "read", "wamid.B", "wamid.B:read"),
        (DELIVERY_STATUS, "failed", "wamid.B", "wamid.B:failed")]
    assert (items[2].error_code, items[2].reason) == (131047, "Re-engagement message: more than 24 hours have passed")
    assert items[2].chat_id == "491"


@pytest.mark.parametrize("kind, content, message_type, text, attachment", [
    ("image", {"image": {"caption": "broken", "mime_type": "image/jpeg", "sha256": "abc", "id": "m1"}},
     "photo", "broken", {"type": "photo", "file_id": "m1", "mime_type": "image/jpeg", "sha256": "abc"}),
    ("document", {"document": {"filename": "bill.pdf", "mime_type": "application/pdf", "sha256": "d", "id": "m2"}},
     "document", "", {"type": "document", "file_id": "m2", "name": "bill.pdf", "mime_type": "application/pdf",
                      "sha256": "d"}),
    ("audio", {"audio": {"mime_type": "audio/ogg; codecs=opus", "sha256": "v", "id": "m3", "voice": True}},
     "voice", "", {"type": "voice", "file_id": "m3", "mime_type": "audio/ogg; codecs=opus", "sha256": "v"}),
    ("audio", {"audio": {"mime_type": "audio/mpeg", "id": "m4"}},
     "audio", "", {"type": "audio", "file_id": "m4", "mime_type": "audio/mpeg"}),
    ("video", {"video": {"caption": "see", "mime_type": "video/mp4", "id": "m5"}},
     "video", "see", {"type": "video", "file_id": "m5", "mime_type": "video/mp4"}),
    ("sticker", {"sticker": {"mime_type": "image/webp", "id": "m6", "animated": False}},
     "sticker", "", {"type": "sticker", "file_id": "m6", "mime_type": "image/webp", "animated": False}),
    ("location", {"location": {"latitude": 52.5, "longitude": 13.4, "name": "Shop", "address": "Main St"}},
     "location", "", {"type": "location", "latitude": 52.5, "longitude": 13.4, "name": "Shop", "address": "Main St"}),
    ("contacts", {"contacts": [{"name": {"formatted_name": "Bob B"}, "phones": [{"phone": "+49 1", "wa_id": "491"}]}]},
     "contact", "", {"type": "contact", "name": "Bob B", "phone_number": "+49 1", "wa_id": "491"}),
])
def test_non_text_messages_keep_metas_media_id_type_and_name(whatsapp_fake, kind, content, message_type, text,
                                                             attachment):
    [item] = notifications.parse(encode(whatsapp_fake.notification("1", messages=[
        whatsapp_fake.message("491", kind, **content)])))
    assert (item.message_type, item.text) == (message_type, text)
    assert item.variables()["attachments"] == [attachment]


def test_buttons_lists_and_template_quick_replies_come_back_with_their_ids(whatsapp_fake):
    def one(message):
        return notifications.parse(encode(whatsapp_fake.notification("1", messages=[message])))[0]
    listed = one(whatsapp_fake.message("491", "interactive", interactive={
        "type": "list_reply", "list_reply": {"id": "exp", "title": "Express", "description": "1 day"}}))
    quick = one(whatsapp_fake.message("491", "button", button={"payload": "stop", "text": "Stop promotions"}))
    assert [(m.message_type, m.text, m.button_id) for m in (listed, quick)] == [
        ("button", "Express", "exp"), ("button", "Stop promotions", "stop")]


def test_reactions_system_messages_and_unknown_types_are_not_started_as_text(whatsapp_fake):
    items = notifications.parse(encode(whatsapp_fake.notification("1", messages=[
        whatsapp_fake.message("491", "reaction", reaction={"message_id": "wamid.X", "emoji": "👍"}),
        whatsapp_fake.message("491", "system", system={"body": "changed number"}),
        whatsapp_fake.message("491", "unsupported", errors=[{"code": 131051}]),
    ])))
    assert [(type(i).__name__, getattr(i, "event", None)) for i in items[:2]] == [
        ("InboundEvent", "reaction"), ("InboundEvent", "system")]
    assert isinstance(items[2], InboundMessage) and items[2].message_type == "unsupported"


def test_other_fields_and_broken_items_are_acknowledged_not_raised(whatsapp_fake):
    other = {"object": "whatsapp_business_account", "entry": [{"changes": [
        {"field": "account_update", "value": {"event": "X"}},
        {"field": "messages", "value": {"metadata": {"phone_number_id": "1"}, "messages": [{"type": "text"}],
                                        "statuses": [{"id": "w", "status": "exploded"}],
                                        "errors": [{"code": 130429, "title": "Rate limit hit"}]}}]}]}
    items = notifications.parse(encode(other))
    assert all(isinstance(i, InboundEvent) and i.kind == IGNORED for i in items)
    assert [i.event for i in items] == ["account_update", "messages", "statuses", "errors"]
    assert items[1].reason.startswith("malformed") and items[1].account_id == "1"
    assert (items[3].error_code, items[3].reason) == (130429, "Rate limit hit")


@pytest.mark.parametrize("body", [b'{"object": "page", "entry": []}', b'{"entry": {}}',
                                  b'{"object": "whatsapp_business_account"}', b"[]", b"\x00"])
def test_bodies_that_are_not_notifications_are_bad_requests(body):
    with pytest.raises(BadRequestError):
        notifications.parse(body)
