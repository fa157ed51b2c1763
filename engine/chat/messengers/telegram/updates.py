"""Telegram's webhook updates (https://core.telegram.org/bots/api#update) as Baton's inbound items.

One call carries one ``Update``: ``message`` (text, or a photo / document / voice / audio / video /
video_note / animation / sticker with an optional ``caption``, a location, venue or contact),
``callback_query`` (a pressed inline button: ``data`` is the button's id, its title is read from the
message's ``reply_markup``), ``edited_message`` (acknowledged only) and ``my_chat_member`` (the user
blocked the bot: ``kicked``; or unblocked it: ``member``; in a group: the bot was removed or added).
The dedup id is ``update_id``.

In a group or supergroup the chat is the group (where answers go) and the sender is ``from``: a group
message without one is not handled. Service messages (members joining or leaving, a pinned message, a
new title or photo, the group created, an auto-delete timer...) are acknowledged only; a group that
becomes a supergroup (``migrate_to_chat_id``) moves its chat to the new id.
"""
from __future__ import annotations

from typing import Any

from engine.chat.messengers.items import (BUTTON, IGNORED, MOVED, REACHABLE, TEXT, UNREACHABLE, UNSUPPORTED,
                                          Attachment, InboundEvent, InboundItem, InboundMessage, as_dict,
                                          as_id, as_int, as_list, as_text, load_json_object, malformed)
from engine.errors import BadRequestError

CHANNEL = "telegram"
# Checked in this order: an animation also carries ``document`` (Telegram keeps it for old clients).
_FILE_KINDS = ("animation", "document", "voice", "audio", "video", "video_note", "sticker")
_GONE = ("kicked", "left")
_GROUPS = ("group", "supergroup")
# A message with one of these is Telegram telling about the chat, not someone writing in it.
_SERVICE = ("new_chat_members", "left_chat_member", "new_chat_title", "new_chat_photo", "delete_chat_photo",
            "group_chat_created", "supergroup_chat_created", "channel_chat_created", "pinned_message",
            "migrate_from_chat_id", "message_auto_delete_timer_changed", "video_chat_started", "video_chat_ended",
            "video_chat_scheduled", "video_chat_participants_invited", "forum_topic_created", "forum_topic_edited",
            "forum_topic_closed", "forum_topic_reopened", "general_forum_topic_hidden",
            "general_forum_topic_unhidden", "boost_added", "chat_background_set", "write_access_allowed",
            "users_shared", "chat_shared", "proximity_alert_triggered")


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
    chat = as_dict(message.get("chat"))
    chat_id = as_id(chat.get("id"))
    if chat_id is None:
        return malformed(CHANNEL, "message", "the message has no chat id", dedup_id)
    moved_to = as_id(message.get("migrate_to_chat_id"))
    if moved_to is not None:
        return InboundEvent(channel=CHANNEL, kind=MOVED, event="migrate_to_chat_id", dedup_id=dedup_id,
                            chat_id=chat_id, new_chat_id=moved_to)
    service = next((key for key in _SERVICE if key in message), None)
    if service is not None:
        return InboundEvent(channel=CHANNEL, kind=IGNORED, event=service, dedup_id=dedup_id, chat_id=chat_id)
    sender = as_dict(message.get("from"))
    sender_id = as_id(sender.get("id"))
    if sender_id is None and chat.get("type") in _GROUPS:
        return malformed(CHANNEL, "message", "a group message has no sender", dedup_id)
    message_type, attachments = _content(message)
    text = as_text(message.get("text")) if message_type == TEXT else as_text(message.get("caption"))
    return InboundMessage(channel=CHANNEL, dedup_id=dedup_id, chat_id=chat_id,
                          user_id=sender_id or chat_id, display_name=_name(sender),
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
    """A pressed button, with the id of the message it was on (``pressed_on``; None when Telegram no
    longer sends that message, and the press is then refused as an old one)."""
    sender = as_dict(query.get("from"))
    message = as_dict(query.get("message"))
    chat_id = as_id(as_dict(message.get("chat")).get("id")) or as_id(sender.get("id"))
    button_id = as_text(query.get("data"))
    if chat_id is None or button_id is None or as_id(sender.get("id")) is None:
        return malformed(CHANNEL, "callback_query", "the pressed button has no chat, no sender or no data",
                         dedup_id)
    title = _button_title(message, button_id)
    return InboundMessage(channel=CHANNEL, dedup_id=dedup_id, chat_id=chat_id,
                          user_id=as_id(sender.get("id")), display_name=_name(sender),
                          text=title, message_type=BUTTON, button_id=button_id,
                          callback_query_id=as_id(query.get("id")), pressed_on=as_id(message.get("message_id")))


def _button_title(message: dict[str, Any], button_id: str) -> str:
    """The title of the pressed button, read from the keyboard of the message it belongs to (Telegram
    sends that message along); the id itself when the message is too old to be included."""
    for row in as_list(as_dict(message.get("reply_markup")).get("inline_keyboard")):
        for button in as_list(row):
            if isinstance(button, dict) and button.get("callback_data") == button_id:
                return as_text(button.get("text")) or button_id
    return button_id


def _membership(dedup_id: str, update: dict[str, Any]) -> InboundEvent:
    """The bot's own membership: in a private chat the user blocked (``kicked``) or unblocked it; in a
    group someone removed the bot or added it back (not a customer blocking it)."""
    chat = as_dict(update.get("chat"))
    chat_id = as_id(chat.get("id"))
    status = as_text(as_dict(update.get("new_chat_member")).get("status"))
    group = chat.get("type") in _GROUPS
    if status in _GONE:
        reason = "the bot was removed from the group" if group else "the user blocked the bot"
        return InboundEvent(channel=CHANNEL, kind=UNREACHABLE, event="my_chat_member", dedup_id=dedup_id,
                            chat_id=chat_id, status=status, reason=reason)
    kind = REACHABLE if status == "member" or (group and status == "administrator") else IGNORED
    return InboundEvent(channel=CHANNEL, kind=kind, event="my_chat_member", dedup_id=dedup_id,
                        chat_id=chat_id, status=status)


def _name(user: dict[str, Any]) -> str | None:
    full = " ".join(part for part in (as_text(user.get("first_name")), as_text(user.get("last_name"))) if part)
    return full or as_text(user.get("username"))


def _present(details: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in details.items()
            if value is not None and not isinstance(value, (dict, list))}
