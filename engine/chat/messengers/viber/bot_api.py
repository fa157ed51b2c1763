"""Viber's REST Bot API (https://developers.viber.com/docs/api/rest-bot-api/): connecting a bot,
verifying its callbacks (parsed in ``callbacks``), sending replies and reading Viber's answers.

Followed: every call is a POST with ``X-Viber-Auth-Token``; answers are HTTP 200 with ``status`` (0 =
ok) and ``status_message``; ``get_account_info``; ``set_webhook`` (``url``, ``event_types``,
``send_name``) during which Viber POSTs event ``webhook`` to the URL and registers it only if that
answers 200; ``set_webhook`` with an empty ``url`` removes it; callbacks are signed with
``X-Viber-Content-Signature`` = hex HMAC-SHA256 of the body keyed with the auth token; ``send_message``
(``receiver``, ``type`` text of at most 7000 characters, ``sender.name`` of at most 28, a ``keyboard``
whose reply buttons send their ``ActionBody`` back as text, ``Text`` of at most 250 characters,
``tracking_data`` of at most 4000 characters returned with the user's reply).
"""
from __future__ import annotations

import html
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from engine.chat.messengers.connection import Connection, call, quote, refused, unavailable, webhook_url
from engine.chat.messengers.items import InboundEvent, InboundItem, as_id, as_int, as_text, header, hmac_sha256_hex, same_secret
from engine.chat.messengers.protocol import Addressed, InboundCall, Messenger
from engine.chat.messengers.sending import (DEAD, OTHER, RETRY, SENT, UNREACHABLE, UNSUBSCRIBED, WAIT, Button, HttpRequest,
                                            Media, OutboundCall, SendOutcome,
                                            answer_object, common_button_refusals, refuse_buttons, require_text,
                                            split_text)
from engine.chat.messengers.settings import SettingsSpec, message_setting, text_setting, token_setting
from engine.chat.messengers.viber import callbacks
from engine.errors import InvalidParamsError, MessengerUnavailableError
from engine.outbound import OutboundHttp, OutboundResponse

DEFAULT_API_URL = "https://chatapi.viber.com/pa"
WEBHOOK_PATH = "/channels/viber/inbound"
CHANNEL_QUERY = "channel"          # the webhook URL's ?channel=<key> finds the channel (Viber's body does not)
AUTH_HEADER = "X-Viber-Auth-Token"
SIGNATURE_HEADER = callbacks.SIGNATURE_HEADER
TEXT_LIMIT = 7000
PICTURE_TEXT_MAX = 768             # a picture's description
FILE_MAX_BYTES = 50 * 1024 * 1024  # a file message's size limit
BUTTON_TEXT_MAX = 250
TRACKING_DATA_MAX = 4000
KEYBOARD_MAX_ROWS = 24            # rows of one keyboard
REQUEST_MAX_BYTES = 30 * 1024      # "The maximum total JSON size of the request is 30kb"
KEYBOARD_MIN_API_VERSION = 3       # Viber's keyboard docs: API level 3 (Viber 7.6+) covers every parameter sent
EVENT_TYPES = ("delivered", "seen", "failed", "subscribed", "unsubscribed", "conversation_started")

# status -> can a message sent again ever succeed? (Viber's error codes, 0 = ok)
_DEAD_STATUSES = {3: "badData", 4: "missingData", 5: "receiverNotRegistered", 6: "receiverNotSubscribed",
                  11: "receiverNoSuitableDevice", 13: "apiVersionNotSupported", 14: "incompatibleWithVersion",
                  16: "inchatReplyMessageNotAllowed", 17: "publicAccountIsNotInline", 18: "noPublicChat",
                  19: "cannotSendBroadcast", 20: "broadcastNotAllowed"}
TOO_MANY_REQUESTS, TOO_MANY_REQUESTS_WAIT_S = 12, 1.0    # Viber gives no figure of how long to wait
_FAILURES = {5: UNREACHABLE, 6: UNSUBSCRIBED, 11: UNREACHABLE}
_ACCOUNT_STATUSES = (2, 7, 8, 9, 15)   # invalidAuthToken, blocked, not found, suspended, not authorized


def new_channel_key() -> str:
    """A fresh lookup key for the webhook URL (``?channel=<key>``): not a secret, the signature is."""
    return secrets.token_hex(8)


def channel_key(query: Mapping[str, str]) -> str | None:
    key = query.get(CHANNEL_QUERY)
    return key if isinstance(key, str) and 0 < len(key) <= 64 and key.isalnum() else None


class Viber(Messenger):
    """A Viber bot: the webhook URL names its channel, its auth token signs the callbacks."""

    type = "viber"
    name = "Viber"
    settings_spec = SettingsSpec("viber", (
        token_setting("auth_token", "the bot's authentication token from Viber (Settings > Bots > Edit Info > "
                                    "Your app key)", max_length=200),
        text_setting("sender_name", "the sender name shown on replies, at most 28 characters", max_length=28),
        message_setting("welcome_text", "the message a user sees on opening the chat, at most 7000 characters "
                                        "(optional)", max_length=TEXT_LIMIT),
    ))

    # --- connect --------------------------------------------------------------------------------------

    def connect(self, http: OutboundHttp, settings: Mapping[str, Any], public_url: str, *,
                api_url: str = DEFAULT_API_URL) -> Connection:
        """Check the token (``get_account_info``), then register the webhook (``set_webhook`` with the
        events Baton handles) on a URL naming a new channel key. Baton's inbound endpoint must answer
        Viber's ``webhook`` check with 200 while this runs (``answers_at_once``), before the channel
        is stored."""
        token = self.settings_spec.check(settings)["auth_token"]
        info = _call(http, api_url, token, "get_account_info", {})
        key = new_channel_key()
        url = webhook_url(public_url, WEBHOOK_PATH, **{CHANNEL_QUERY: key})
        _call(http, api_url, token, "set_webhook",
              {"url": url, "event_types": list(EVENT_TYPES), "send_name": True, "send_photo": False},
              what=f"the webhook URL {url}", param="webhook_url")
        uri = as_text(info.get("uri"))
        return Connection(bot_id=as_id(info.get("id")) or "", bot_name=as_text(info.get("name")) or "",
                          webhook_url=url, inbound_key=key, details={"bot_uri": uri} if uri else {})

    def disconnect(self, http: OutboundHttp, settings: Mapping[str, Any], *, api_url: str = DEFAULT_API_URL) -> None:
        """Remove the webhook (``set_webhook`` with an empty ``url``)."""
        _call(http, api_url, self.settings_spec.check(settings)["auth_token"], "set_webhook", {"url": ""})

    def registered_webhook(self, http: OutboundHttp, settings: Mapping[str, Any], *,
                           api_url: str = DEFAULT_API_URL) -> str | None:
        """The URL Viber calls now (``get_account_info``'s ``webhook``)."""
        info = _call(http, api_url, self.settings_spec.check(settings)["auth_token"], "get_account_info", {})
        return as_text(info.get("webhook")) or None

    # --- inbound --------------------------------------------------------------------------------------

    def answers_at_once(self, call: InboundCall) -> bool:
        """Viber's check during ``set_webhook``: answered 200 at once, even before the channel exists."""
        return callbacks.is_webhook_check(call.body)

    def addressed(self, call: InboundCall) -> Addressed:
        """The channel the URL's ``?channel=`` names."""
        key = channel_key(call.query)
        return Addressed((key,) if key else ())

    def verifying_secret(self, settings: Mapping[str, Any], webhook_secret: str | None) -> str | None:
        return settings.get("auth_token")

    def verify(self, call: InboundCall, secret: str) -> bool:
        """True when ``X-Viber-Content-Signature`` is the HMAC of these exact bytes keyed with the auth
        token (constant time)."""
        given = header(call.headers, SIGNATURE_HEADER)
        return same_secret(given.lower() if given else None, hmac_sha256_hex(secret, call.body))

    def parse(self, body: bytes) -> list[InboundItem]:
        """One callback as inbound items; BadRequestError when it is not a Viber callback."""
        return callbacks.parse(body)

    def answer_body(self, item: InboundItem, settings: Mapping[str, Any]) -> dict[str, Any] | None:
        """The welcome message, answered to ``conversation_started`` (Viber sends it to the user; a
        bot may not send them anything else before they write), with the deep link's context in its
        ``tracking_data``."""
        welcome = settings.get("welcome_text")
        if not isinstance(item, InboundEvent) or item.event != "conversation_started" or not welcome:
            return None
        answer = {"sender": {"name": settings.get("sender_name")}, "type": "text", "text": welcome}
        if item.context:
            answer["tracking_data"] = callbacks.welcome_tracking_data(item.context)
        return answer

    # --- outbound -------------------------------------------------------------------------------------

    def calls(self, chat_id: str, text: str, buttons: Sequence[Button] = (), media: Media | None = None
              ) -> list[OutboundCall]:
        """``send_message`` calls for one reply: parts of at most 7000 characters cut at whitespace; the
        keyboard goes with the last call (``keyboard`` builds it within Viber's limits), with
        ``tracking_data`` mapping each title to its id (a pressed button comes back as its title) and
        ``min_api_version``. With a file: a ``picture`` (the text as its description when it fits
        Viber's 768 characters) or a ``file`` (which has no text: ``size`` and ``file_name`` are
        required), then the text's parts."""
        refuse_buttons(self.name, self.button_refusals(buttons))
        text = require_text(text, self.name)
        file_call = None if media is None else _file_call(chat_id, media)
        if file_call is not None and media.type == "image" and len(text) <= PICTURE_TEXT_MAX:
            file_call.payload["text"] = text
            made = [file_call]
        else:
            made = [OutboundCall("send_message", {"receiver": chat_id, "type": "text", "text": part})
                    for part in split_text(text, TEXT_LIMIT)]
            made = made if file_call is None else [file_call, *made]
        if buttons:
            with_keyboard = {"min_api_version": KEYBOARD_MIN_API_VERSION,
                             "tracking_data": callbacks.button_tracking_data(buttons), "keyboard": keyboard(buttons)}
            made[-1].payload.update(with_keyboard)
            made[-1:] = _within_request_limit(made[-1], with_keyboard)
        return made

    def attachment_refusals(self, attachment_type: str, size_given: bool) -> list[str]:
        """Viber's ``file`` messages must say their size: a document needs ``attachment_size``."""
        if attachment_type == "document" and not size_given:
            return ["Viber sends a document only with its size: give the send_message an 'attachment_size' "
                    "(bytes)."]
        return []

    def request(self, settings: Mapping[str, Any], outbound: OutboundCall, *,
                api_url: str = DEFAULT_API_URL) -> HttpRequest:
        """The HTTP request for a stored call, with the channel's current token and sender name."""
        checked = self.settings_spec.check(settings)
        payload = {**outbound.payload, "sender": {"name": checked["sender_name"]}}
        return _http_request(api_url, checked["auth_token"], outbound.method, payload)

    def classify(self, response: OutboundResponse) -> SendOutcome:
        """Read Viber's answer from its body (Viber answers HTTP 200 even when it refuses): ``status`` 0
        is sent; a receiver who is not subscribed, not on Viber or on a device that cannot show the
        message, and a request Viber calls bad are dead at once; the rest (token, account, rate limit,
        5xx) is retried."""
        answer = _answer_of(response)
        if answer is None:
            return SendOutcome(RETRY, reason=f"{self.name} answered HTTP {response.status} without a REST API answer.")
        status = answer["status"]
        if status == 0:
            return SendOutcome(SENT, message_id=as_id(answer.get("message_token")))
        reason = quote(f"{answer.get('status_message') or _DEAD_STATUSES.get(status, 'error')} (status {status})")
        if status in _DEAD_STATUSES:
            return SendOutcome(DEAD, reason=reason, failure=_FAILURES.get(status, OTHER))
        if status == TOO_MANY_REQUESTS:     # Viber's rate control: the whole account waits a moment
            return SendOutcome(WAIT, reason=reason, wait_s=TOO_MANY_REQUESTS_WAIT_S)
        return SendOutcome(RETRY, reason=reason)

    def button_refusals(self, buttons: Sequence[Button]) -> list[str]:
        """What Viber cannot carry (refused at deploy): the common rules, a title over 250 characters,
        and more buttons than ``tracking_data`` (4000 characters) can map back to their ids."""
        refusals = common_button_refusals(buttons)
        for button in buttons:
            if isinstance(button.title, str) and len(html.escape(button.title)) > BUTTON_TEXT_MAX:
                refusals.append(f"Button title '{button.title[:40]}...' is longer than Viber's {BUTTON_TEXT_MAX} "
                                "characters.")
        if not refusals and len(callbacks.button_tracking_data(buttons)) > TRACKING_DATA_MAX:
            refusals.append(f"The buttons' titles and ids together are too long for Viber: they must fit in "
                            f"{TRACKING_DATA_MAX} characters of tracking data.")
        if not refusals and buttons:
            smallest = {"receiver": "x" * 32, "type": "text", "text": "x", "min_api_version": KEYBOARD_MIN_API_VERSION,
                        "tracking_data": callbacks.button_tracking_data(buttons), "keyboard": keyboard(buttons)}
            if request_size(smallest) > REQUEST_MAX_BYTES:
                refusals.append(f"The keyboard of these {len(buttons)} buttons is {request_size(smallest)} bytes; "
                                f"Viber takes messages of at most {REQUEST_MAX_BYTES} bytes: use fewer or shorter "
                                "buttons.")
        if len(buttons) > KEYBOARD_MAX_ROWS * 6:
            refusals.append(f"Viber's keyboard holds at most {KEYBOARD_MAX_ROWS * 6} buttons, not {len(buttons)}.")
        return refusals


def keyboard(buttons: Sequence[Button]) -> dict[str, Any]:
    """Reply buttons as Viber's keyboard: one per row while they fit its 24 rows, else two, three or
    six side by side (a row is 6 columns wide), in order."""
    per_row = next((n for n in (1, 2, 3) if -(-len(buttons) // n) <= KEYBOARD_MAX_ROWS), 6)
    return {"Type": "keyboard", "DefaultHeight": False, "Buttons": [
        {"Columns": 6 // per_row, "Rows": 1, "ActionType": "reply", "ActionBody": button.title,
         "Text": html.escape(button.title), "TextSize": "regular"} for button in buttons]}


def request_size(payload: dict[str, Any]) -> int:
    """The bytes of a ``send_message`` body (with the longest sender name ``request`` adds)."""
    return len(json.dumps({**payload, "sender": {"name": "x" * 28}}, ensure_ascii=False).encode("utf-8")) + 112


def _within_request_limit(last: OutboundCall, with_keyboard: dict[str, Any]) -> list[OutboundCall]:
    """The last call with the keyboard, its text moved into calls before it when the whole body would
    pass Viber's 30 KB; buttons whose keyboard alone cannot fit are refused at deploy."""
    text = last.payload.get("text")
    if request_size(last.payload) <= REQUEST_MAX_BYTES or last.payload.get("type") != "text" or len(text) < 2:
        return [last]
    room = REQUEST_MAX_BYTES - request_size({**last.payload, "text": ""})
    parts = split_text(text, max(2, room // 4))           # 4 bytes per character at worst
    base = {key: value for key, value in last.payload.items() if key not in with_keyboard}
    return [OutboundCall(last.method, {**base, "text": part}) for part in parts[:-1]] + [
        OutboundCall(last.method, {**last.payload, "text": parts[-1]})]


def _file_call(chat_id: str, media: Media) -> OutboundCall:
    if media.type == "image":
        return OutboundCall("send_message", {"receiver": chat_id, "type": "picture", "text": "", "media": media.url})
    if media.type != "document":
        raise InvalidParamsError(f"Viber cannot send an attachment of type '{media.type}'.",
                                 data={"param": "attachment_type"})
    if media.size is None:
        raise InvalidParamsError("Viber sends a document only with its size: give 'attachment_size' (bytes).",
                                 data={"param": "attachment_size"})
    if media.size > FILE_MAX_BYTES:
        raise InvalidParamsError(f"Viber sends files of at most {FILE_MAX_BYTES} bytes, not {media.size}.",
                                 data={"param": "attachment_size"})
    return OutboundCall("send_message", {"receiver": chat_id, "type": "file", "media": media.url,
                                         "size": media.size, "file_name": media.file_name})


def _call(http: OutboundHttp, api_url: str, token: str, method: str, payload: dict[str, Any], *,
          what: str = "the auth_token", param: str = "settings.auth_token") -> dict[str, Any]:
    response = call(http, Viber.name, _http_request(api_url, token, method, payload))
    answer = _answer_of(response)
    if answer is None:
        raise unavailable(Viber.name, response)
    status = answer["status"]
    if status == 0:
        return answer
    if status == 12:
        raise MessengerUnavailableError(f"{Viber.name} refuses calls for a while (tooManyRequests); nothing was "
                                        "changed, try again later.")
    if status in _ACCOUNT_STATUSES:
        what, param = "the auth_token", "settings.auth_token"
    raise refused(Viber.name, param, what, f"{answer.get('status_message')} (status {status})", [token])


def _http_request(api_url: str, token: str, method: str, payload: dict[str, Any]) -> HttpRequest:
    return HttpRequest("POST", f"{api_url.rstrip('/')}/{method}",
                       {AUTH_HEADER: token, "Content-Type": "application/json"},
                       json.dumps(payload, ensure_ascii=False).encode("utf-8"))


def _answer_of(response: OutboundResponse) -> dict[str, Any] | None:
    """A REST API answer (HTTP 200, an object with an integer ``status``), else None."""
    answer = answer_object(response) if response.status == 200 else None
    if answer is None or as_int(answer.get("status")) is None:
        return None
    return {**answer, "status": as_int(answer["status"])}
