"""Telegram's webhook updates (https://core.telegram.org/bots/api#update) as Baton's inbound items.

One call carries one ``Update``: ``message`` (text, or a photo / document / voice / audio / video /
video_note / animation / sticker with an optional ``caption``, a location, venue or contact),
``callback_query`` (a pressed inline button: ``data`` is the button's id, its title is read from the
message's ``reply_markup``), ``edited_message`` (acknowledged only) and ``my_chat_member`` (the user
blocked the bot: ``kicked``; or unblocked it: ``member``). The dedup id is ``update_id``.
"""
from __future__ import annotations

from typing import Any

from engine.chat.messengers.items import (BUTTON, IGNORED, REACHABLE, TEXT, UNREACHABLE, UNSUPPORTED,
                                          Attachment, InboundEvent, InboundItem, InboundMessage, as_dict,
                                          as_id, as_int, as_list, as_text, load_json_object, malformed)
from engine.errors import BadRequestError

CHANNEL = "telegram"
# Checked in this order: an animation also carries ``document`` (Telegram keeps it for old clients).
_FILE_KINDS = ("animation", "document", "voice", "audio", "video", "video_note", "sticker")
_GONE = ("kicked", "left")


def parse(body: bytes) -> list[InboundItem]:
    """The items of one update, or BadRequestError when the body is not an update at all."""
    update = load_json_object(body, "Telegram")
    update_id = as_int(update.get("update_id"))
    if update_id is None:
        raise BadRequestError("The Telegram call has no integer 'update_id'; it is not an update.")
    dedup_id = str(update_id)
    if "message" in update:
        return [_message(dedup_id, as_dict(update["message"]))]
    if "callback_query" in update:
        return [_button(dedup_id, as_dict(update["callback_query"]))]
    if "my_chat_member" in update:
        return [_membership(dedup_id, as_dict(update["my_chat_member"]))]
    kind = next((key for key in update if key != "update_id"), "unknown")
    chat = as_dict(as_dict(update.get(kind)).get("chat"))
    return [InboundEvent(channel=CHANNEL, kind=IGNORED, event=kind, dedup_id=dedup_id,
                         chat_id=as_id(chat.get("id")))]


def _message(dedup_id: str, message: dict[str, Any]) -> InboundItem:
    chat_id = as_id(as_dict(message.get("chat")).get("id"))
    if chat_id is None:
        return malformed(CHANNEL, "message", "the message has no chat id", dedup_id)
    sender = as_dict(message.get("from"))
    message_type, attachments = _content(message)
    text = as_text(message.get("text")) if message_type == TEXT else as_text(message.get("caption"))
    return InboundMessage(channel=CHANNEL, dedup_id=dedup_id, chat_id=chat_id,
                          user_id=as_id(sender.get("id")) or chat_id, display_name=_name(sender),
                          text=text or "", message_type=message_type, attachments=attachments)


def _content(message: dict[str, Any]) -> tuple[str, tuple[Attachment, ...]]:
    """(message_type, attachments) of a message."""
    if isinstance(message.get("text"), str):
        return TEXT, ()
    photo_sizes = [size for size in as_list(message.get("photo")) if isinstance(size, dict)]
    if photo_sizes:                                      # several sizes of one photo: keep the largest
        largest = max(photo_sizes, key=lambda size: (as_int(size.get("width")) or 0) *
                      (as_int(size.get("height")) or 0))
        return "photo", (_file("photo", largest),)
    for kind in _FILE_KINDS:
        if isinstance(message.get(kind), dict):
            return kind, (_file(kind, message[kind]),)
    venue = as_dict(message.get("venue"))
    location = as_dict(message.get("location")) or as_dict(venue.get("location"))
    if location:
        details = {"latitude": location.get("latitude"), "longitude": location.get("longitude"),
                   "title": as_text(venue.get("title")), "address": as_text(venue.get("address"))}
        return "location", (Attachment("location", details=_present(details)),)
    contact = as_dict(message.get("contact"))
    if contact:
        details = {key: contact.get(key) for key in ("phone_number", "first_name", "last_name", "user_id")}
        return "contact", (Attachment("contact", details=_present(details)),)
    return UNSUPPORTED, ()


def _file(kind: str, described: dict[str, Any]) -> Attachment:
    details = {key: described.get(key) for key in ("file_unique_id", "width", "height", "duration", "emoji")}
    return Attachment(kind, file_id=as_text(described.get("file_id")), name=as_text(described.get("file_name")),
                      size=as_int(described.get("file_size")), mime_type=as_text(described.get("mime_type")),
                      details=_present(details))


def _button(dedup_id: str, query: dict[str, Any]) -> InboundItem:
    sender = as_dict(query.get("from"))
    message = as_dict(query.get("message"))
    chat_id = as_id(as_dict(message.get("chat")).get("id")) or as_id(sender.get("id"))
    button_id = as_text(query.get("data"))
    if chat_id is None or button_id is None:
        return malformed(CHANNEL, "callback_query", "the pressed button has no chat or no data", dedup_id)
    title = _button_title(message, button_id)
    return InboundMessage(channel=CHANNEL, dedup_id=dedup_id, chat_id=chat_id,
                          user_id=as_id(sender.get("id")) or chat_id, display_name=_name(sender),
                          text=title, message_type=BUTTON, button_id=button_id,
                          callback_query_id=as_id(query.get("id")))


def _button_title(message: dict[str, Any], button_id: str) -> str:
    """The title of the pressed button, read from the keyboard of the message it belongs to (Telegram
    sends that message along); the id itself when the message is too old to be included."""
    for row in as_list(as_dict(message.get("reply_markup")).get("inline_keyboard")):
        for button in as_list(row):
            if isinstance(button, dict) and button.get("callback_data") == button_id:
                return as_text(button.get("text")) or button_id
    return button_id


def _membership(dedup_id: str, update: dict[str, Any]) -> InboundEvent:
    chat_id = as_id(as_dict(update.get("chat")).get("id"))
    status = as_text(as_dict(update.get("new_chat_member")).get("status"))
    if status in _GONE:
        return InboundEvent(channel=CHANNEL, kind=UNREACHABLE, event="my_chat_member", dedup_id=dedup_id,
                            chat_id=chat_id, status=status, reason="the user blocked the bot")
    kind = REACHABLE if status == "member" else IGNORED
    return InboundEvent(channel=CHANNEL, kind=kind, event="my_chat_member", dedup_id=dedup_id,
                        chat_id=chat_id, status=status)


def _name(user: dict[str, Any]) -> str | None:
    full = " ".join(part for part in (as_text(user.get("first_name")), as_text(user.get("last_name"))) if part)
    return full or as_text(user.get("username"))


def _present(details: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in details.items()
            if value is not None and not isinstance(value, (dict, list))}
