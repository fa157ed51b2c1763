"""WhatsApp's Cloud API (https://developers.facebook.com/docs/whatsapp/cloud-api): checking a business
phone number, Meta's webhook handshake and signatures (the notifications are parsed in
``notifications``), sending replies and reading Meta's answers.

Followed: ``GET /<phone_number_id>`` with ``Authorization: Bearer <access token>``; the webhook is set
in Meta's app dashboard (nothing to register by API), Meta checks it with ``GET ?hub.mode=subscribe
&hub.verify_token=...&hub.challenge=...`` (echo the challenge) and signs every POST with
``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body keyed with the app secret>``;
``POST /<phone_number_id>/messages`` with ``messaging_product: whatsapp`` (text body of at most 4096
characters; interactive reply buttons: at most 3, titles of at most 20 characters and unique, ids of
at most 256, body of at most 1024); Graph errors are ``{"error": {"message", "type", "code",
"error_data": {"details"}}}`` where ``code`` decides (131047 = outside the 24-hour customer service
window; 130429 / 80007 / 131056 / 4 = rate limits).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.chat.messengers.connection import Connection, call, quote, refused, unavailable, webhook_url
from engine.chat.messengers.items import (NO_SECRET, InboundItem, InboundMessage, as_dict, as_int, as_list, as_text, header,
                                          hmac_sha256_hex, same_secret)
from engine.chat.messengers.protocol import Addressed, InboundCall, Messenger
from engine.chat.messengers.sending import (DEAD, OTHER, RETRY, SENT, UNREACHABLE, WAIT, WINDOW_CLOSED, Button, HttpRequest,
                                            Media, OutboundCall, SendOutcome,
                                            answer_object, common_button_refusals, refuse_buttons, require_text,
                                            split_text, utf16_length)
from engine.chat.messengers.settings import SettingsSpec, digits_setting, flag_setting, token_setting
from engine.chat.messengers.whatsapp import notifications
from engine.errors import BadRequestError, InvalidParamsError, MessengerUnavailableError, OutboundError
from engine.outbound import OutboundHttp, OutboundResponse

DEFAULT_API_URL = "https://graph.facebook.com/v21.0"
WEBHOOK_PATH = "/webhooks/whatsapp"
SIGNATURE_HEADER = "X-Hub-Signature-256"
TEXT_LIMIT = 4096
INTERACTIVE_BODY_LIMIT = 1024
CAPTION_LIMIT = 1024
MAX_BUTTONS, BUTTON_TITLE_MAX, BUTTON_ID_MAX = 3, 20, 256
RATE_LIMIT_WAIT_S = 60.0           # Meta gives no Retry-After for its rate-limit codes: wait a minute
PAIR_RATE_CODE, PAIR_RATE_WAIT_S = 131056, 6.0   # the pair rate: about one message per 6 s to one customer
MAX_CHALLENGE = 1000

_WAIT_CODES = {130429, 80007, 131056, 4}
# The request or the recipient can never succeed as it is: window closed, undeliverable, invalid.
_DEAD_CODES = {131047, 131026, 131051, 131021, 131030, 131008, 131009, 100, 470, 132000, 132001}
_TOKEN_CODES = {190, 0, 10, 102, 463, 467}        # OAuth: expired, invalid or missing permission
_UNAVAILABLE_CODES = {1, 2, 131000, 131016}


class WhatsApp(Messenger):
    """A WhatsApp business number: its id finds the channel, the Meta app's secret signs notifications."""

    type = "whatsapp"
    name = "WhatsApp"
    window_s = 24 * 3600.0
    settings_spec = SettingsSpec("whatsapp", (
        digits_setting("phone_number_id", "the Phone number ID shown in Meta's WhatsApp > API Setup"),
        token_setting("access_token", "a permanent (system user) access token with whatsapp_business_messaging",
                      max_length=1024),
        token_setting("app_secret", "the App secret from Meta's App settings > Basic", max_length=256),
        token_setting("verify_token", "the Verify token you type into Meta's webhook configuration",
                      max_length=256),
        flag_setting("mark_read", "whether a message a process takes is marked as read (blue ticks)"),
    ))
    secret_shared_by_accounts = True     # the app secret signs every number's notifications

    # --- connect --------------------------------------------------------------------------------------

    def connect(self, http: OutboundHttp, settings: Mapping[str, Any], public_url: str, *,
                api_url: str = DEFAULT_API_URL) -> Connection:
        """Check the phone number and token (``GET /<phone_number_id>``). Nothing is registered: the
        webhook URL is pasted into Meta's dashboard, whose check Baton answers (``handshake``)."""
        checked = self.settings_spec.check(settings)
        number = checked["phone_number_id"]
        response = call(http, self.name, HttpRequest("GET", f"{api_url.rstrip('/')}/{number}"
                                                     "?fields=id,display_phone_number,verified_name",
                                                     {"Authorization": f"Bearer {checked['access_token']}"}))
        answer = answer_object(response)
        if answer is None or (response.status >= 500 and "error" not in answer):
            raise unavailable(self.name, response)
        error = as_dict(answer.get("error"))
        if not error and 200 <= response.status < 300:
            display = as_text(answer.get("display_phone_number"))
            return Connection(bot_id=number, bot_name=as_text(answer.get("verified_name")) or display or number,
                              webhook_url=webhook_url(public_url, WEBHOOK_PATH), inbound_key=number,
                              details={"display_phone_number": display} if display else {})
        code = as_int(error.get("code"))
        if code in _WAIT_CODES or code in _UNAVAILABLE_CODES or response.status >= 500:
            raise MessengerUnavailableError(f"{self.name} cannot check the number now ({_reason(error)}); "
                                            "nothing was changed, try again later.")
        token_problem = code in _TOKEN_CODES or 200 <= (code or 0) <= 299 or response.status in (401, 403)
        param, what = ("settings.access_token", "the access_token") if token_problem else \
            ("settings.phone_number_id", f"the phone_number_id {number}")
        raise refused(self.name, param, what, _reason(error), self.settings_spec.secrets_of(checked))

    def disconnect(self, http: OutboundHttp, settings: Mapping[str, Any], *, api_url: str = DEFAULT_API_URL) -> None:
        """Nothing to unregister by API (the webhook belongs to the Meta app); the settings are still checked."""
        self.settings_spec.check(settings)

    def registered_webhook(self, http: OutboundHttp, settings: Mapping[str, Any], *,
                           api_url: str = DEFAULT_API_URL) -> str | None:
        """Meta does not say by API which URL the app's webhook calls: None (nothing to unregister)."""
        self.settings_spec.check(settings)
        return None

    def settings_key(self, settings: Mapping[str, Any]) -> str | None:
        """The number: what Meta's notifications name (``metadata.phone_number_id``)."""
        return settings.get("phone_number_id")

    def key_taken(self, key: str) -> str:
        return (f"The WhatsApp number {key} is already connected to another channel: Meta sends a number's "
                "messages to one webhook, so it can belong to one channel.")

    # --- inbound --------------------------------------------------------------------------------------

    def handshake(self, query: Mapping[str, str], channel_settings: Iterable[Mapping[str, Any]]) -> str | None:
        """The challenge to echo when Meta's ``GET`` carries ``hub.mode=subscribe`` and the verify token
        of one of the channels (each compared in constant time, all of them always); else None (403)."""
        matches = [same_secret(query.get("hub.verify_token"), settings.get("verify_token") or NO_SECRET)
                   for settings in channel_settings]
        challenge = query.get("hub.challenge")
        if query.get("hub.mode") != "subscribe" or not any(matches):
            return None
        if not isinstance(challenge, str) or not 0 < len(challenge) <= MAX_CHALLENGE or not challenge.isprintable():
            return None
        return challenge

    def addressed(self, call: InboundCall) -> Addressed:
        """The numbers a signed notification's items name (``metadata.phone_number_id``), each its
        channel's key: one notification may carry several numbers' items. A call with no signature,
        or a body that is no notification, names none (no channel to verify it with)."""
        if header(call.headers, SIGNATURE_HEADER) is None:
            return Addressed()
        try:
            items = self.parse(call.body)
        except BadRequestError:
            return Addressed()
        return Addressed(tuple(dict.fromkeys(item.account_id for item in items if item.account_id)), items)

    def key_of(self, item: InboundItem, keys: tuple[str, ...]) -> str | None:
        """Each item goes to its number's channel (items of numbers Baton does not know to none)."""
        return item.account_id

    def verifying_secret(self, settings: Mapping[str, Any], webhook_secret: str | None) -> str | None:
        return settings.get("app_secret")

    def verify(self, call: InboundCall, secret: str) -> bool:
        """True when ``X-Hub-Signature-256`` is ``sha256=`` + the HMAC of these exact bytes keyed with
        the app secret (constant time)."""
        given = header(call.headers, SIGNATURE_HEADER)
        return same_secret(given.lower() if given else None, "sha256=" + hmac_sha256_hex(secret, call.body))

    def parse(self, body: bytes) -> list[InboundItem]:
        """Every message and status of one notification, in order (entries, changes, then each list);
        BadRequestError when it is not a WhatsApp notification. Items carry ``account_id`` =
        ``metadata.phone_number_id``."""
        return notifications.parse(body)

    def file_request(self, http: OutboundHttp, settings: Mapping[str, Any], source: str, *,
                     api_url: str = DEFAULT_API_URL) -> HttpRequest:
        """``GET /<media id>`` for the media's short-lived ``url``, then that URL, both with the
        bearer token (Meta's media URLs need it)."""
        checked = self.settings_spec.check(settings)
        bearer = {"Authorization": f"Bearer {checked['access_token']}"}
        if not source.isascii() or not source.isdigit():
            raise OutboundError(f"{self.name} media ids are digits; '{source[:40]}' is not one.")
        response = call(http, self.name, HttpRequest(
            "GET", f"{api_url.rstrip('/')}/{source}?phone_number_id={checked['phone_number_id']}", bearer))
        answer = answer_object(response)
        if answer is None or (response.status >= 500 and "error" not in answer):
            raise unavailable(self.name, response)
        url = as_text(answer.get("url"))
        if "error" in answer or not url:
            raise OutboundError(f"{self.name} refused the media: {_reason(as_dict(answer.get('error')))}")
        return HttpRequest("GET", url, bearer)

    # --- outbound -------------------------------------------------------------------------------------

    def calls(self, chat_id: str, text: str, buttons: Sequence[Button] = (), media: Media | None = None
              ) -> list[OutboundCall]:
        """``messages`` calls for one reply: text parts of at most 4096 characters cut at whitespace;
        with buttons the last part (re-split to at most 1024 characters, the interactive body's limit)
        is an interactive reply-buttons message. With a file: an ``image`` or ``document`` by ``link``
        (Meta fetches it), the text as its caption when it fits 1024 characters and no buttons need an
        interactive message, else the file first and the text after it."""
        refuse_buttons(self.name, self.button_refusals(buttons))
        text = require_text(text, self.name)
        base = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": chat_id}
        file_call = None if media is None else _file_call(base, media)
        if file_call is not None and not buttons and utf16_length(text) <= CAPTION_LIMIT:
            file_call.payload[media.type]["caption"] = text
            return [file_call]
        parts = split_text(text, TEXT_LIMIT)
        if buttons and utf16_length(parts[-1]) > INTERACTIVE_BODY_LIMIT:
            parts[-1:] = split_text(parts[-1], INTERACTIVE_BODY_LIMIT)
        made = [OutboundCall("messages", {**base, "type": "text", "text": {"preview_url": False, "body": part}})
                for part in parts]
        if buttons:
            made[-1] = OutboundCall("messages", {**base, "type": "interactive", "interactive": {
                "type": "button", "body": {"text": parts[-1]},
                "action": {"buttons": [{"type": "reply", "reply": {"id": b.id, "title": b.title}} for b in buttons]}}})
        return made if file_call is None else [file_call, *made]

    def read_receipt(self, message: InboundMessage, settings: Mapping[str, Any]) -> OutboundCall | None:
        """With the channel's ``mark_read`` on: ``{"status": "read", "message_id": <wamid>}``."""
        if settings.get("mark_read") is not True:
            return None
        return OutboundCall("messages", {"messaging_product": "whatsapp", "status": "read",
                                         "message_id": message.dedup_id})

    def template_call(self, chat_id: str, template: Mapping[str, Any]) -> OutboundCall:
        """``type: template`` with the template's name, language and its body's text parameters in order
        (``{{1}}``, ``{{2}}`` ... of the approved template)."""
        body: dict[str, Any] = {"name": template["name"], "language": {"code": template["language"]}}
        if template.get("params"):
            body["components"] = [{"type": "body", "parameters": [{"type": "text", "text": value}
                                                                  for value in template["params"]]}]
        return OutboundCall("messages", {"messaging_product": "whatsapp", "recipient_type": "individual",
                                         "to": chat_id, "type": "template", "template": body})

    def request(self, settings: Mapping[str, Any], outbound: OutboundCall, *,
                api_url: str = DEFAULT_API_URL) -> HttpRequest:
        """The HTTP request for a stored call, with the channel's current number and access token."""
        checked = self.settings_spec.check(settings)
        return HttpRequest("POST", f"{api_url.rstrip('/')}/{checked['phone_number_id']}/{outbound.method}",
                           {"Authorization": f"Bearer {checked['access_token']}", "Content-Type": "application/json"},
                           json.dumps(outbound.payload, ensure_ascii=False).encode("utf-8"))

    def classify(self, response: OutboundResponse) -> SendOutcome:
        """Read Meta's answer from its body: a ``wamid`` is sent; ``error.code`` 131047 (24-hour window
        closed) and other requests that can never succeed are dead at once; rate limits (130429, 80007,
        131056, 4) wait; anything else (expired token, 5xx, no Graph answer) is retried."""
        answer = answer_object(response)
        if answer is None:
            return SendOutcome(RETRY, reason=f"{self.name} answered HTTP {response.status} without a Graph API answer.")
        error = as_dict(answer.get("error"))
        wamid = as_text(as_dict(next(iter(as_list(answer.get("messages"))), None)).get("id"))
        if not error and 200 <= response.status < 300 and wamid:
            return SendOutcome(SENT, message_id=wamid)
        if not error and 200 <= response.status < 300 and answer.get("success") is True:
            return SendOutcome(SENT)                        # a message marked as read
        code = as_int(error.get("code"))
        reason = _reason(error) if error else f"{self.name} answered HTTP {response.status} without a message id."
        if code in _WAIT_CODES:
            wait = response.retry_after_s()
            if code == PAIR_RATE_CODE:      # too many to this one customer: only this chat waits
                return SendOutcome(WAIT, reason=reason, wait_s=PAIR_RATE_WAIT_S if wait is None else wait,
                                   whole_bot=False)
            return SendOutcome(WAIT, reason=reason, wait_s=RATE_LIMIT_WAIT_S if wait is None else wait)
        if code in _DEAD_CODES:
            return SendOutcome(DEAD, reason=reason, failure=self.failure_of(code))
        return SendOutcome(RETRY, reason=reason)

    def failure_of(self, error_code: int | None) -> str:
        """131047: the 24-hour window is closed; 131026: the number cannot receive it; else other."""
        return {131047: WINDOW_CLOSED, 131026: UNREACHABLE}.get(error_code, OTHER)

    def button_refusals(self, buttons: Sequence[Button]) -> list[str]:
        """What WhatsApp cannot carry (refused at deploy): the common rules, more than 3 buttons, a
        title over 20 characters, an id over 256 characters or with spaces around it."""
        refusals = common_button_refusals(buttons)
        if len(buttons) > MAX_BUTTONS:
            refusals.append(f"WhatsApp shows at most {MAX_BUTTONS} reply buttons, not {len(buttons)}.")
        for button in buttons:
            if isinstance(button.title, str) and len(button.title) > BUTTON_TITLE_MAX:
                refusals.append(f"Button title '{button.title}' is longer than WhatsApp's {BUTTON_TITLE_MAX} "
                                "characters.")
            if isinstance(button.id, str) and (len(button.id) > BUTTON_ID_MAX or button.id != button.id.strip()):
                refusals.append(f"Button id '{button.id[:40]}' must be at most {BUTTON_ID_MAX} characters "
                                "without spaces around it for WhatsApp.")
        return refusals


def _file_call(base: dict[str, Any], media: Media) -> OutboundCall:
    if media.type == "image":
        return OutboundCall("messages", {**base, "type": "image", "image": {"link": media.url}})
    if media.type != "document":
        raise InvalidParamsError(f"WhatsApp cannot send an attachment of type '{media.type}'.",
                                 data={"param": "attachment_type"})
    return OutboundCall("messages", {**base, "type": "document",
                                     "document": {"link": media.url, "filename": media.file_name}})


def _reason(error: dict[str, Any]) -> str:
    """Meta's message, its details when they add something, and the code that decided."""
    message = as_text(error.get("message")) or "no message"
    details = as_text(as_dict(error.get("error_data")).get("details"))
    code = as_int(error.get("code"))
    text = f"{message}: {details}" if details and details not in message else message
    return quote(text if code is None or f"#{code}" in text else f"{text} (code {code})")
