"""What an inbound messenger call becomes (normalized messages and events: its items) and the door
every parser shares: the JSON checks, safe field readers and constant-time secret comparison."""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine import json_values
from engine.errors import BadRequestError

MAX_JSON_DEPTH = json_values.MAX_DEPTH
MAX_ID_LENGTH = 255          # chat, user and message ids longer than this are not real ids
# Compared against when no channel matched, so that an unknown channel costs what a wrong secret does.
NO_SECRET = "baton-no-channel-" + "0" * 48

# Message types (the process variable ``message_type``).
TEXT, BUTTON, UNSUPPORTED = "text", "button", "unsupported"
MEDIA_TYPES = ("photo", "document", "voice", "audio", "video", "animation", "video_note", "sticker")
MESSAGE_TYPES = (TEXT, BUTTON, *MEDIA_TYPES, "location", "contact", UNSUPPORTED)

# Event kinds: what Baton does with a non-message call.
DELIVERY_STATUS = "delivery_status"  # an outbound message was sent / delivered / read / failed
UNREACHABLE = "unreachable"          # the customer blocked the bot or unsubscribed: deliveries are dead at once
REACHABLE = "reachable"              # the customer (re)subscribed or unblocked the bot
MOVED = "moved"                      # the chat has a new id (a Telegram group became a supergroup)
IGNORED = "ignored"                  # acknowledged only (edits, webhook checks, malformed items, ...)
EVENT_KINDS = (DELIVERY_STATUS, UNREACHABLE, REACHABLE, MOVED, IGNORED)


@dataclass(frozen=True)
class Attachment:
    """A file or a shared place/contact, as the messenger describes it; a file gets Baton's own
    ``attachment_id`` when its message is taken (fetched through ``GET /v1/media/...``)."""

    type: str
    file_id: str | None = None
    url: str | None = None
    name: str | None = None
    size: int | None = None
    mime_type: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)   # latitude/longitude, phone_number, ...
    attachment_id: str | None = None

    @property
    def source(self) -> str | None:
        """What the messenger fetches the file by (a file / media id, or a URL); None: no file."""
        return self.file_id or self.url

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in the ``attachments`` variable: only the fields the messenger gave."""
        found = {"type": self.type, "attachment_id": self.attachment_id, "file_id": self.file_id, "url": self.url,
                 "name": self.name, "size": self.size, "mime_type": self.mime_type}
        return {key: value for key, value in found.items() if value is not None} | dict(self.details)


@dataclass(frozen=True)
class InboundMessage:
    """A customer's message: routed like a web-chat message (INTERFACE §6).

    ``dedup_id`` is the messenger's own id (Telegram ``update_id``, Viber ``message_token``, WhatsApp
    ``wamid``); ``chat_id`` is where answers go and the ``external_user_id`` variable."""

    channel: str
    dedup_id: str
    chat_id: str
    user_id: str
    display_name: str | None
    text: str
    message_type: str = TEXT
    attachments: tuple[Attachment, ...] = ()
    button_id: str | None = None
    account_id: str | None = None          # WhatsApp: metadata.phone_number_id (finds the channel)
    callback_query_id: str | None = None   # Telegram: a pressed button, to answer with answerCallbackQuery
    pressed_on: str | None = None          # Telegram: the messenger's id of the message whose button it was
    context: str | None = None             # Viber: the deep link's context, carried by the welcome message

    def variables(self) -> dict[str, Any]:
        """The process variables a message sets; every key is always present so that conditions such
        as ``message_type == "photo"`` never fail on a plain text message (``context`` only when a
        Viber deep link gave one)."""
        return {"message_text": self.text, "external_user_id": self.chat_id,
                "external_username": self.display_name, "channel": self.channel,
                "message_type": self.message_type,
                "attachments": [attachment.to_dict() for attachment in self.attachments],
                "button_id": self.button_id, **({"context": self.context} if self.context is not None else {})}


@dataclass(frozen=True)
class InboundEvent:
    """Anything else a messenger reports: acknowledged, recorded where useful, never started as a message.

    ``event`` is the messenger's own name for it (``my_chat_member``, ``unsubscribed``, ``statuses``...);
    ``message_id`` is the outbound message a delivery status is about."""

    channel: str
    kind: str
    event: str
    dedup_id: str | None = None
    chat_id: str | None = None
    message_id: str | None = None
    status: str | None = None              # sent, delivered, read, failed
    reason: str | None = None
    error_code: int | None = None
    account_id: str | None = None
    new_chat_id: str | None = None         # MOVED: where the chat is now
    context: str | None = None             # Viber conversation_started: the deep link's context


InboundItem = InboundMessage | InboundEvent


# --- the JSON door --------------------------------------------------------------------------------

def load_json_object(body: bytes, messenger: str) -> dict[str, Any]:
    """A messenger's body as one JSON object within Baton's limits (``engine.json_values``), or
    BadRequestError saying what is wrong with it."""
    try:
        value = json_values.parse_checked(body)
    except json_values.JsonSyntaxError:
        raise BadRequestError(f"The {messenger} call is not valid JSON.") from None
    except json_values.JsonValueError as exc:
        raise BadRequestError(f"The {messenger} call is refused at {exc}.", data={"where": exc.where}) from None
    if not isinstance(value, dict):
        raise BadRequestError(f"The {messenger} call must be a JSON object, not {type(value).__name__}.")
    return value


# --- safe field readers: a wrong type reads as missing, never as an exception ---------------------

def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.strip().isdigit():
        return int(value)
    return None


def as_id(value: Any) -> str | None:
    """An id given as a JSON integer or a non-empty string, as text; None when absent or absurd."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        value = str(value)
    if isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and value.strip() == value:
        return value
    return None


def malformed(channel: str, event: str, why: str, dedup_id: str | None = None) -> InboundEvent:
    """An item that cannot be handled: acknowledged (so the messenger stops retrying) and recorded."""
    return InboundEvent(channel=channel, kind=IGNORED, event=event, dedup_id=dedup_id,
                        reason=f"malformed: {why}")


# --- verification ---------------------------------------------------------------------------------

def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value whatever the case of its name (Flask's headers and plain dicts alike)."""
    value = headers.get(name)
    if value is None:
        wanted = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == wanted), None)
    return value


def same_secret(given: str | None, expected: str | None) -> bool:
    """Constant-time equality of a received secret and the stored one (both as UTF-8 bytes, so a
    non-ASCII header cannot raise); a missing value on either side is never equal."""
    if given is None or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"),
                               expected.encode("utf-8", "surrogateescape"))


def hmac_sha256_hex(key: str, body: bytes) -> str:
    """Lower-case hex HMAC-SHA256 of the exact body bytes (Viber's and Meta's signatures)."""
    return hmac.new(key.encode("utf-8"), body, hashlib.sha256).hexdigest()
