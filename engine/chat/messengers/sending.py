"""What every messenger's outbound side shares: buttons, the credential-free call to store in a
delivery, the outcome of one attempt, and splitting long texts at whitespace."""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from engine.errors import InvalidParamsError, OutboundError, OutboundRefusedError
from engine.outbound import OutboundResponse

# Outcome kinds of one send attempt.
SENT = "sent"        # accepted by the messenger
WAIT = "wait"        # rate limited: try again after ``wait_s`` (not counted as a failure of the schedule)
RETRY = "retry"      # a passing failure (5xx, timeout, revoked token...): the normal retry schedule
DEAD = "dead"        # can never succeed (blocked, unsubscribed, window closed, refused request): dead at once
OUTCOME_KINDS = (SENT, WAIT, RETRY, DEAD)

# Why a reply is dead, as the process hears it (``delivery_reason`` of the ``delivery_failed`` message).
BLOCKED, UNSUBSCRIBED, WINDOW_CLOSED, TOO_LONG, UNREACHABLE, OTHER = (
    "blocked", "unsubscribed", "window_closed", "too_long", "unreachable", "other")
FAILURES = (BLOCKED, UNSUBSCRIBED, WINDOW_CLOSED, TOO_LONG, UNREACHABLE, OTHER)


@dataclass(frozen=True)
class Button:
    """A reply button: ``title`` is what the customer sees (and what comes back as ``message_text``),
    ``id`` what comes back as ``button_id``."""

    id: str
    title: str


ATTACHMENT_TYPES = ("image", "document")


@dataclass(frozen=True)
class Media:
    """A file a reply carries (``send_message``'s ``attachment_url`` / ``attachment_type``): the
    messenger fetches it from ``url`` itself; ``size`` in bytes when the process gave it (Viber's
    files need it)."""

    type: str                        # image, document
    url: str
    size: int | None = None

    @property
    def file_name(self) -> str:
        """The last segment of the URL's path (what a customer sees a document called), or 'document'."""
        segment = unquote(urlsplit(self.url).path.rstrip("/").rpartition("/")[2]).strip()
        return segment[:255] if segment and segment.isprintable() else "document"


@dataclass(frozen=True)
class OutboundCall:
    """One API call to make, without credentials or URLs: safe to store in a delivery row and to send
    with the channel's *current* settings on every attempt (``<messenger>.request``)."""

    method: str                      # sendMessage, answerCallbackQuery, send_message, messages
    payload: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "payload": self.payload}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> OutboundCall:
        stored = json.loads(text)
        return cls(method=stored["method"], payload=stored["payload"])


@dataclass(frozen=True)
class HttpRequest:
    """A ready request for ``OutboundHttp.request``; its URL may carry a token: never log it."""

    method: str
    url: str
    headers: dict[str, str] = field(repr=False)
    body: bytes | None = field(repr=False, default=None)


@dataclass(frozen=True)
class SendOutcome:
    """What one attempt came to; ``reason`` quotes the messenger; ``message_id`` is the messenger's id
    of the sent message (Telegram ``message_id``, Viber ``message_token``, WhatsApp ``wamid``), which
    later delivery-status events name; ``failure`` says why a dead one is dead (``FAILURES``);
    ``whole_bot``: a wait that holds every chat of the bot (a 429), not only this chat (a pair rate)."""

    kind: str
    reason: str | None = None
    wait_s: float | None = None
    message_id: str | None = None
    failure: str | None = None
    whole_bot: bool = True


def answer_object(response: OutboundResponse) -> dict[str, Any] | None:
    """A messenger's answer as a JSON object; None for anything else (a proxy's HTML page, garbage)."""
    try:
        answer = json.loads(response.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return answer if isinstance(answer, dict) else None


def transport_failure(error: OutboundError | OutboundRefusedError) -> SendOutcome:
    """The outcome when no answer came: a refused URL never changes (dead), anything else is passing."""
    if isinstance(error, OutboundRefusedError):
        return SendOutcome(DEAD, reason=error.message)
    return SendOutcome(RETRY, reason=error.message)


# --- text --------------------------------------------------------------------------------------------

def utf16_length(text: str) -> int:
    """Length in UTF-16 code units: how Telegram counts, and never less than the character count, so
    a limit kept in these units is kept by every messenger's counting."""
    return len(text.encode("utf-16-le")) // 2


def split_text(text: str, limit: int) -> list[str]:
    """``text`` as consecutive parts of at most ``limit`` UTF-16 units, cut at whitespace (the
    whitespace at a cut is dropped; a newline is preferred to a space when one is in the second half
    of the part), and hard at the limit only inside a word longer than the limit."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    parts: list[str] = []
    rest = text
    while utf16_length(rest) > limit:
        window = _prefix_within(rest, limit)
        cut = _cut_position(window, len(rest) > len(window) and rest[len(window)].isspace())
        if cut == 0:                       # no whitespace: a word longer than the limit
            parts.append(window)
            rest = rest[len(window):]
            continue
        parts.append(window[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest or not parts:
        parts.append(rest)
    return [part for part in parts if part] or [""]


def _prefix_within(text: str, limit: int) -> str:
    """The longest prefix of ``text`` that is at most ``limit`` UTF-16 units."""
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return text[:index]
    return text


def _cut_position(window: str, next_is_space: bool) -> int:
    """Where to cut ``window``: after the preferred whitespace, or 0 when it has none."""
    if next_is_space:
        return len(window)
    newline = window.rfind("\n")
    if newline >= len(window) // 2:
        return newline + 1
    for index in range(len(window) - 1, 0, -1):
        if window[index].isspace():
            return index + 1
    return 0


def require_text(text: Any, messenger: str) -> str:
    """A message text to send: a non-blank string (every messenger refuses empty messages)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidParamsError(f"A message to {messenger} needs a non-empty text.",
                                 data={"param": "text"})
    return text


# --- buttons -----------------------------------------------------------------------------------------

def common_button_refusals(buttons: Sequence[Button]) -> list[str]:
    """What no messenger can carry: empty or blank ids and titles, repeated ids or titles (a title
    is what a customer picks and what comes back, so two alike could not be told apart)."""
    refusals: list[str] = []
    seen_ids: set[str] = set()
    seen_titles: set[str] = set()
    for number, button in enumerate(buttons, start=1):
        if not isinstance(button.id, str) or not button.id.strip():
            refusals.append(f"Button {number} has no id.")
        elif button.id in seen_ids:
            refusals.append(f"Button id '{button.id}' is used twice.")
        if not isinstance(button.title, str) or not button.title.strip():
            refusals.append(f"Button {number} has no title.")
        elif button.title in seen_titles:
            refusals.append(f"Button title '{button.title}' is used twice.")
        seen_ids.add(button.id)
        seen_titles.add(button.title)
    return refusals


def refuse_buttons(messenger: str, refusals: list[str]) -> None:
    """Buttons that slipped past deploy (a template, ``conversation.send``) are refused before sending."""
    if refusals:
        raise InvalidParamsError(f"{messenger} cannot carry these buttons: {' '.join(refusals)}",
                                 data={"param": "buttons"})

