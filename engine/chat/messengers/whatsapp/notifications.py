"""WhatsApp Cloud API webhook notifications (https://developers.facebook.com/docs/whatsapp/cloud-api/
webhooks/components) as Baton's items.

One call is ``{"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "messages",
"value": {...}}]}]}``; each ``value`` names its number (``metadata.phone_number_id``), its senders
(``contacts``: ``wa_id`` and ``profile.name``), and carries ``messages`` (text, image, document, audio
(``voice`` for voice notes), video, sticker, location, contacts, interactive ``button_reply`` /
``list_reply``, template ``button``; ``id`` = the wamid, the dedup id) and ``statuses`` (``sent``,
``delivered``, ``read``, ``failed`` with ``errors``) of Baton's own messages. Everything is kept in order.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.chat.messengers.items import (BUTTON, DELIVERY_STATUS, IGNORED, TEXT, UNSUPPORTED, Attachment,
                                          InboundEvent, InboundItem, InboundMessage, as_dict, as_id, as_int,
                                          as_list, as_text, load_json_object, malformed)
from engine.errors import BadRequestError

CHANNEL = "whatsapp"
_MEDIA = {"image": "photo", "document": "document", "video": "video", "sticker": "sticker", "audio": "audio"}
_STATUSES = ("sent", "delivered", "read", "failed")
_NOT_MESSAGES = ("reaction", "system")                # acknowledged, never started as a customer message


def parse(body: bytes) -> list[InboundItem]:
    notification = load_json_object(body, "WhatsApp")
    entries = notification.get("entry")
    if notification.get("object") != "whatsapp_business_account" or not isinstance(entries, list):
        raise BadRequestError("The WhatsApp call is not a notification: it needs 'object': "
                              "'whatsapp_business_account' and an 'entry' list.")
    items: list[InboundItem] = []
    for entry in entries:
        for change in as_list(as_dict(entry).get("changes")):
            items += _change(as_dict(change))
    return items


def _change(change: dict[str, Any]) -> list[InboundItem]:
    value = as_dict(change.get("value"))
    account = as_id(as_dict(value.get("metadata")).get("phone_number_id"))
    field = as_text(change.get("field")) or "unknown"
    if field != "messages":
        return [InboundEvent(channel=CHANNEL, kind=IGNORED, event=field, account_id=account)]
    names = {as_id(contact.get("wa_id")): as_text(as_dict(contact.get("profile")).get("name"))
             for contact in map(as_dict, as_list(value.get("contacts")))}
    items: list[InboundItem] = [_message(as_dict(message), names, account)
                                for message in as_list(value.get("messages"))]
    items += [_status(as_dict(status), account) for status in as_list(value.get("statuses"))]
    for error in map(as_dict, as_list(value.get("errors"))):
        items.append(InboundEvent(channel=CHANNEL, kind=IGNORED, event="errors", account_id=account,
                                  error_code=as_int(error.get("code")), reason=as_text(error.get("title"))))
    return items


def _message(message: dict[str, Any], names: dict[str | None, str | None], account: str | None) -> InboundItem:
    wamid, sender = as_id(message.get("id")), as_id(message.get("from"))
    kind = as_text(message.get("type")) or "unknown"
    if wamid is None or sender is None or account is None:
        return _with_account(malformed(CHANNEL, "messages", "the message has no id, no sender or no "
                                       "phone_number_id", wamid), account)
    if kind in _NOT_MESSAGES:
        return InboundEvent(channel=CHANNEL, kind=IGNORED, event=kind, dedup_id=wamid, chat_id=sender,
                            account_id=account)
    text, message_type, attachments, button_id = _content(kind, message)
    return InboundMessage(channel=CHANNEL, dedup_id=wamid, chat_id=sender, user_id=sender,
                          display_name=names.get(sender), text=text, message_type=message_type,
                          attachments=attachments, button_id=button_id, account_id=account)


def _content(kind: str, message: dict[str, Any]) -> tuple[str, str, tuple[Attachment, ...], str | None]:
    """(text, message_type, attachments, button_id) of one message."""
    body = as_dict(message.get(kind))
    if kind == "text":
        return as_text(body.get("body")) or "", TEXT, (), None
    if kind in _MEDIA:
        message_type = "voice" if kind == "audio" and body.get("voice") is True else _MEDIA[kind]
        details = {key: body[key] for key in ("sha256", "animated") if isinstance(body.get(key), (str, bool))}
        attachment = Attachment(message_type, file_id=as_text(body.get("id")), name=as_text(body.get("filename")),
                                mime_type=as_text(body.get("mime_type")), details=details)
        return as_text(body.get("caption")) or "", message_type, (attachment,), None
    if kind == "location":
        details = {key: body[key] for key in ("latitude", "longitude", "name", "address")
                   if isinstance(body.get(key), (int, float, str)) and not isinstance(body.get(key), bool)}
        return "", "location", (Attachment("location", details=details),), None
    if kind == "contacts":
        return "", "contact", tuple(_contact(as_dict(c)) for c in as_list(message.get("contacts"))), None
    if kind == "interactive":
        reply = as_dict(body.get("button_reply")) or as_dict(body.get("list_reply"))
        if as_text(reply.get("id")):
            return as_text(reply.get("title")) or reply["id"], BUTTON, (), reply["id"]
    if kind == "button" and as_text(body.get("payload")):          # a template's quick-reply button
        return as_text(body.get("text")) or body["payload"], BUTTON, (), body["payload"]
    return "", UNSUPPORTED, (), None


def _contact(contact: dict[str, Any]) -> Attachment:
    phone = as_dict(next(iter(as_list(contact.get("phones"))), None))
    details = {"name": as_text(as_dict(contact.get("name")).get("formatted_name")),
               "phone_number": as_text(phone.get("phone")), "wa_id": as_text(phone.get("wa_id"))}
    return Attachment("contact", details={key: value for key, value in details.items() if value})


def _status(status: dict[str, Any], account: str | None) -> InboundItem:
    wamid, state = as_id(status.get("id")), as_text(status.get("status"))
    if wamid is None or state not in _STATUSES:
        return _with_account(malformed(CHANNEL, "statuses", "the status has no message id or an unknown "
                                       "status"), account)
    error = as_dict(next(iter(as_list(status.get("errors"))), None))
    details = as_text(as_dict(error.get("error_data")).get("details"))
    title = as_text(error.get("title")) or as_text(error.get("message"))
    reason = f"{title}: {details}" if title and details and details != title else (title or details)
    return InboundEvent(channel=CHANNEL, kind=DELIVERY_STATUS, event="statuses", dedup_id=f"{wamid}:{state}",
                        chat_id=as_id(status.get("recipient_id")), message_id=wamid, status=state,
                        reason=reason, error_code=as_int(error.get("code")), account_id=account)


def _with_account(event: InboundEvent, account: str | None) -> InboundEvent:
    return replace(event, account_id=account)
