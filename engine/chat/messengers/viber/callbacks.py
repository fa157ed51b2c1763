"""Viber's callbacks (https://developers.viber.com/docs/api/rest-bot-api/#callbacks) as Baton's items.

``message`` (types text, picture, video, file, sticker, contact, location, url; the sender's ``id``
and ``name``; ``message_token`` is the dedup id); a pressed keyboard button arrives as a text message
whose text is the button's ``ActionBody`` (its title) with the ``tracking_data`` Baton sent, which maps
titles to ids. ``delivered`` / ``seen`` / ``failed`` (with ``desc``) report on an outbound message by
its ``message_token``; ``subscribed`` / ``unsubscribed``; ``conversation_started`` (with a deep
link's ``context``) is answered with the channel's welcome message when it has one (Viber takes it
from the HTTP answer), which carries the context back in its ``tracking_data``; ``webhook`` is
acknowledged only.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engine.chat.messengers.items import (BUTTON, DELIVERY_STATUS, IGNORED, REACHABLE, TEXT, UNREACHABLE,
                                          UNSUPPORTED, Attachment, InboundEvent, InboundItem, InboundMessage,
                                          as_dict, as_id, as_int, as_text, load_json_object, malformed)
from engine.chat.messengers.sending import Button
from engine.errors import BadRequestError

CHANNEL = "viber"
SIGNATURE_HEADER = "X-Viber-Content-Signature"
_TRACKING_KEY = "baton_buttons"
_CONTEXT_KEY = "baton_context"
CONTEXT_MAX = 3000                 # fits Viber's 4000 characters of tracking_data, escaped
_STATUSES = {"delivered": "delivered", "seen": "read", "failed": "failed"}
_FILES = {"picture": "photo", "video": "video", "file": "document", "sticker": "sticker"}


def button_tracking_data(buttons: Sequence[Button]) -> str:
    """The ``tracking_data`` sent with a keyboard: which id each title stands for."""
    return json.dumps({_TRACKING_KEY: {button.title: button.id for button in buttons}},
                      ensure_ascii=False, separators=(",", ":"))


def is_webhook_check(body: bytes) -> bool:
    try:
        return load_json_object(body, "Viber").get("event") == "webhook"
    except BadRequestError:
        return False


def parse(body: bytes) -> list[InboundItem]:
    callback = load_json_object(body, "Viber")
    event = as_text(callback.get("event"))
    if not event:
        raise BadRequestError("The Viber call has no 'event'; it is not a Viber callback.")
    token = as_id(callback.get("message_token"))
    if event == "message":
        return [_message(token, callback)]
    dedup_id = f"{event}:{token}" if token else None
    if event in _STATUSES:
        return [InboundEvent(channel=CHANNEL, kind=DELIVERY_STATUS, event=event, dedup_id=dedup_id,
                             chat_id=as_id(callback.get("user_id")), message_id=token, status=_STATUSES[event],
                             reason=as_text(callback.get("desc")))]
    if event == "unsubscribed":
        return [InboundEvent(channel=CHANNEL, kind=UNREACHABLE, event=event, dedup_id=dedup_id,
                             chat_id=as_id(callback.get("user_id")), reason="the user unsubscribed from the bot")]
    user_id = as_id(as_dict(callback.get("user")).get("id"))
    kind = REACHABLE if event == "subscribed" else IGNORED
    context = as_text(callback.get("context")) if event == "conversation_started" else None
    return [InboundEvent(channel=CHANNEL, kind=kind, event=event, dedup_id=dedup_id, chat_id=user_id,
                         context=context[:CONTEXT_MAX] if context else None)]


def welcome_tracking_data(context: str) -> str:
    """The ``tracking_data`` of a welcome message: the deep link's context, which Viber sends back with
    the user's reply (and Baton makes the ``context`` variable of the process it starts)."""
    return json.dumps({_CONTEXT_KEY: context}, ensure_ascii=False, separators=(",", ":"))


def _message(token: str | None, callback: dict[str, Any]) -> InboundItem:
    sender = as_dict(callback.get("sender"))
    sender_id = as_id(sender.get("id"))
    if token is None or sender_id is None:
        return malformed(CHANNEL, "message", "the message has no message_token or no sender id",
                         f"message:{token}" if token else None)
    message = as_dict(callback.get("message"))
    kind = as_text(message.get("type"))
    text = as_text(message.get("text")) or ""
    button_id = None
    if kind == TEXT:
        message_type, attachments = TEXT, ()
        button_id = _pressed_button(text, message.get("tracking_data"))
        if button_id is not None:
            message_type = BUTTON
    elif kind == "url":                                  # a link the customer shared: its text is the URL
        message_type, attachments, text = TEXT, (), as_text(message.get("media")) or text
    else:
        message_type, attachments = _content(kind, message)
    return InboundMessage(channel=CHANNEL, dedup_id=token, chat_id=sender_id, user_id=sender_id,
                          display_name=as_text(sender.get("name")), text=text, message_type=message_type,
                          attachments=attachments, button_id=button_id,
                          context=_tracked(message.get("tracking_data"), _CONTEXT_KEY))


def _content(kind: str | None, message: dict[str, Any]) -> tuple[str, tuple[Attachment, ...]]:
    if kind in _FILES:
        details = {key: message[key] for key in ("thumbnail", "duration", "sticker_id")
                   if isinstance(message.get(key), (str, int)) and not isinstance(message.get(key), bool)}
        return _FILES[kind], (Attachment(_FILES[kind], url=as_text(message.get("media")),
                                         name=as_text(message.get("file_name")), size=as_int(message.get("size")),
                                         details=details),)
    if kind == "location":
        place = as_dict(message.get("location"))
        details = {"latitude": place.get("lat"), "longitude": place.get("lon")}
        return "location", (Attachment("location", details={k: v for k, v in details.items() if v is not None}),)
    if kind == "contact":
        contact = as_dict(message.get("contact"))
        details = {"name": as_text(contact.get("name")), "phone_number": as_text(contact.get("phone_number"))}
        return "contact", (Attachment("contact", details={k: v for k, v in details.items() if v is not None}),)
    return UNSUPPORTED, ()


def _tracked(tracking_data: Any, key: str) -> Any:
    """What Baton's ``tracking_data`` holds under ``key`` (None when it is not Baton's JSON)."""
    if not isinstance(tracking_data, str) or key not in tracking_data:
        return None
    try:
        found = json.loads(tracking_data)
    except (ValueError, RecursionError):
        return None
    value = found.get(key) if isinstance(found, dict) else None
    return value if isinstance(value, str) else None


def _pressed_button(text: str, tracking_data: Any) -> str | None:
    """The id of the button whose title is ``text``, when the reply carries Baton's keyboard map."""
    if not isinstance(tracking_data, str) or _TRACKING_KEY not in tracking_data:
        return None
    try:
        mapping = json.loads(tracking_data).get(_TRACKING_KEY)
    except (ValueError, AttributeError, RecursionError):
        return None
    button_id = mapping.get(text) if isinstance(mapping, dict) else None
    return button_id if isinstance(button_id, str) else None
