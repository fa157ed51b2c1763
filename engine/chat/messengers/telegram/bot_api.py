"""Telegram's Bot API (https://core.telegram.org/bots/api): connecting a bot, verifying its webhook
updates (parsed in ``updates``), sending replies and reading Telegram's answers.

Followed: ``getMe``; ``setWebhook`` (``url``, ``secret_token`` of 1-256 characters ``A-Za-z0-9_-``
sent back in ``X-Telegram-Bot-Api-Secret-Token``, ``allowed_updates``); ``deleteWebhook``;
``sendMessage`` (text of 1-4096 characters, no ``parse_mode`` so customer text is never read as
markup, ``reply_markup.inline_keyboard`` with ``callback_data`` of 1-64 bytes); ``answerCallbackQuery``
(clients show a spinner until it is called). Errors are ``{"ok": false, "error_code", "description",
"parameters": {"retry_after"}}``.
"""
from __future__ import annotations

import json
import re
import secrets
from urllib.parse import quote as url_quote
from collections.abc import Mapping, Sequence
from typing import Any

from engine.chat.messengers.connection import Connection, call, quote, refused, unavailable, webhook_url
from engine.chat.messengers.items import (InboundItem, InboundMessage, as_dict, as_id, as_int, as_text, header,
                                          same_secret)
from engine.chat.messengers.protocol import Addressed, InboundCall, Messenger
from engine.chat.messengers.sending import (BLOCKED, DEAD, OTHER, RETRY, SENT, TOO_LONG, UNREACHABLE, WAIT, Button,
                                            HttpRequest, Media, OutboundCall, SendOutcome, answer_object,
                                            common_button_refusals, refuse_buttons, require_text, split_text,
                                            utf16_length)
from engine.chat.messengers.settings import Setting, SettingsSpec
from engine.chat.messengers.telegram import updates
from engine.errors import InvalidParamsError, MessengerUnavailableError, OutboundError
from engine.outbound import OutboundHttp, OutboundResponse

DEFAULT_API_URL = "https://api.telegram.org"
WEBHOOK_PATH = "/webhooks/telegram"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
TEXT_LIMIT = 4096
CAPTION_LIMIT = 1024
_FILE_METHODS = {"image": ("sendPhoto", "photo"), "document": ("sendDocument", "document")}
CALLBACK_DATA_MAX_BYTES = 64
# What Baton handles; anything else (channel posts, inline queries, polls...) is never sent to it.
ALLOWED_UPDATES = ("message", "edited_message", "callback_query", "my_chat_member")

_KEY = re.compile(r"[0-9a-f]{16}")


def new_secret_token() -> str:
    """A fresh per-channel ``secret_token``: ``<16 hex lookup key>_<43 random characters>``.

    The key (not secret) finds the channel; the whole token is then compared in constant time."""
    return f"{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"


def secret_token_key(headers: Mapping[str, str]) -> str | None:
    """The lookup key of the secret token a call carries, or None when it carries none that Baton made."""
    value = header(headers, SECRET_HEADER) or ""
    key, _, rest = value.partition("_")
    return key if _KEY.fullmatch(key) and rest else None


class Telegram(Messenger):
    """A Telegram bot: its token finds it, a secret token of its own proves its updates."""

    type = "telegram"
    name = "Telegram"
    settings_spec = SettingsSpec("telegram", (
        Setting("bot_token", re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{20,200}"), 222, True,
                "a bot token from @BotFather, such as 123456789:AAE..."),
    ))

    # --- connect --------------------------------------------------------------------------------------

    def connect(self, http: OutboundHttp, settings: Mapping[str, Any], public_url: str, *,
                api_url: str = DEFAULT_API_URL) -> Connection:
        """Check the bot token (``getMe``), then register the webhook (``setWebhook``) with a new
        secret token, whose lookup key the URL names (``?channel=<key>``) and finds the channel by."""
        token = self.settings_spec.check(settings)["bot_token"]
        me = as_dict(_call(http, api_url, token, "getMe", {}))
        secret = new_secret_token()
        key = secret.partition("_")[0]
        url = webhook_url(public_url, WEBHOOK_PATH, channel=key)
        _call(http, api_url, token, "setWebhook",
              {"url": url, "secret_token": secret, "allowed_updates": list(ALLOWED_UPDATES)},
              what=f"the webhook URL {url}", param="webhook_url")
        name = " ".join(part for part in (as_text(me.get("first_name")), as_text(me.get("last_name"))) if part)
        username = as_text(me.get("username"))
        return Connection(bot_id=as_id(me.get("id")) or token.split(":", 1)[0], bot_name=name or username or "",
                          webhook_url=url, inbound_key=key, webhook_secret=secret,
                          details={"bot_username": username} if username else {})

    def disconnect(self, http: OutboundHttp, settings: Mapping[str, Any], *, api_url: str = DEFAULT_API_URL) -> None:
        """Unregister the webhook (``deleteWebhook``); Telegram keeps undelivered updates for a later one."""
        _call(http, api_url, self.settings_spec.check(settings)["bot_token"], "deleteWebhook", {})

    def webhook_info(self, http: OutboundHttp, settings: Mapping[str, Any], *,
                     api_url: str = DEFAULT_API_URL) -> dict[str, Any]:
        """Telegram's own view of the webhook (``getWebhookInfo``): ``url``, ``pending_update_count``,
        ``last_error_message``..., to show why updates do not arrive."""
        return as_dict(_call(http, api_url, self.settings_spec.check(settings)["bot_token"], "getWebhookInfo", {}))

    def registered_webhook(self, http: OutboundHttp, settings: Mapping[str, Any], *,
                           api_url: str = DEFAULT_API_URL) -> str | None:
        """The URL Telegram sends the bot's updates to now (a bot has one; another channel may have
        taken it since)."""
        return as_text(self.webhook_info(http, settings, api_url=api_url).get("url")) or None

    # --- inbound --------------------------------------------------------------------------------------

    def addressed(self, call: InboundCall) -> Addressed:
        """The channel whose secret token's lookup key the call carries."""
        key = secret_token_key(call.headers)
        return Addressed((key,) if key else ())

    def verifying_secret(self, settings: Mapping[str, Any], webhook_secret: str | None) -> str | None:
        return webhook_secret

    def verify(self, call: InboundCall, secret: str) -> bool:
        """True when the call carries this secret token (compared in constant time)."""
        return same_secret(header(call.headers, SECRET_HEADER), secret)

    def parse(self, body: bytes) -> list[InboundItem]:
        """One webhook call (one update) as inbound items; BadRequestError when it is not an update."""
        return updates.parse(body)

    def receipt_id(self, dedup_id: str, connection: Mapping[str, Any]) -> str:
        """Telegram's ``update_id`` counts per bot, so it goes with the bot's id (a channel given
        another bot's token must not take its update 17 for the old bot's)."""
        return f"{connection.get('bot_id')}:{dedup_id}"

    def button_answer(self, message: InboundMessage, refusal: str | None = None) -> OutboundCall | None:
        """``answerCallbackQuery``: clients show a spinner on a pressed inline button until it comes;
        a ``refusal`` is shown to the user as a short notice (at most 200 characters)."""
        if not message.callback_query_id:
            return None
        return answer_callback(message.callback_query_id, refusal[:200] if refusal else None)

    def file_request(self, http: OutboundHttp, settings: Mapping[str, Any], source: str, *,
                     api_url: str = DEFAULT_API_URL) -> HttpRequest:
        """``getFile`` for the ``file_path``, then ``<api_url>/file/bot<token>/<file_path>`` (Telegram
        lets bots download files of up to 20 MB)."""
        token = self.settings_spec.check(settings)["bot_token"]
        response = call(http, self.name, _http_request(api_url, token, "getFile", {"file_id": source}))
        answer = _answer_of(response)
        if answer is None:
            raise unavailable(self.name, response)
        path = as_text(as_dict(answer.get("result")).get("file_path")) if answer.get("ok") is True else None
        if not path or ".." in path.split("/") or path.startswith("/"):
            said = quote(answer.get("description") or "no file_path", [token])
            raise OutboundError(f"{self.name} refused the file: {said}")
        return HttpRequest("GET", f"{api_url.rstrip('/')}/file/bot{token}/{url_quote(path, safe='/')}", {})

    # --- outbound -------------------------------------------------------------------------------------

    def calls(self, chat_id: str, text: str, buttons: Sequence[Button] = (), media: Media | None = None
              ) -> list[OutboundCall]:
        """``sendMessage`` calls for one reply: the text split at whitespace into parts of at most 4096
        characters, in order; the buttons, one per row, go with the last part. With a file:
        ``sendPhoto`` / ``sendDocument`` by URL (Telegram fetches it), the text as its caption when it
        fits Telegram's 1024 characters (the buttons then go with the file), else the file first and
        the text after it."""
        refuse_buttons(self.name, self.button_refusals(buttons))
        text = require_text(text, self.name)
        markup = {"inline_keyboard": [[{"text": button.title, "callback_data": button.id}] for button in buttons]}
        file_call = None if media is None else _file_call(chat_id, media)
        if file_call is not None and utf16_length(text) <= CAPTION_LIMIT:
            file_call.payload["caption"] = text
            if buttons:
                file_call.payload["reply_markup"] = markup
            return [file_call]
        made = [OutboundCall("sendMessage", {"chat_id": chat_id, "text": part}) for part in split_text(text, TEXT_LIMIT)]
        if buttons:
            made[-1].payload["reply_markup"] = markup
        return made if file_call is None else [file_call, *made]

    def request(self, settings: Mapping[str, Any], outbound: OutboundCall, *,
                api_url: str = DEFAULT_API_URL) -> HttpRequest:
        """The HTTP request for a stored call, with the channel's current token (in the URL: never log it)."""
        token = self.settings_spec.check(settings)["bot_token"]
        return _http_request(api_url, token, outbound.method, outbound.payload)

    def classify(self, response: OutboundResponse) -> SendOutcome:
        """Read Telegram's answer from its body: sent; 429 waits ``parameters.retry_after``; 400 (a
        request that can never succeed, e.g. chat not found) and 403 (blocked by the user, kicked,
        deactivated) are dead at once; anything else (401 revoked token, 5xx, no Bot API answer) is retried."""
        answer = _answer_of(response)
        if answer is None:
            return SendOutcome(RETRY, reason=f"{self.name} answered HTTP {response.status} without a Bot API answer.")
        if answer.get("ok") is True:
            result = answer.get("result")
            return SendOutcome(SENT, message_id=as_id(as_dict(result).get("message_id")))
        code = as_int(answer.get("error_code")) or response.status
        reason = quote(answer.get("description"))
        if code == 429:
            wait = as_int(as_dict(answer.get("parameters")).get("retry_after"))
            wait_s = float(wait) if wait is not None else response.retry_after_s()
            return SendOutcome(WAIT, reason=reason, wait_s=wait_s) if wait_s is not None else \
                SendOutcome(RETRY, reason=reason)
        if code in (400, 403):
            return SendOutcome(DEAD, reason=reason, failure=_failure(code, reason))
        return SendOutcome(RETRY, reason=reason)

    def button_refusals(self, buttons: Sequence[Button]) -> list[str]:
        """What Telegram cannot carry (refused at deploy): the common rules, and an id (sent back as
        ``callback_data``) of more than 64 bytes."""
        refusals = common_button_refusals(buttons)
        for button in buttons:
            if isinstance(button.id, str) and len(button.id.encode("utf-8")) > CALLBACK_DATA_MAX_BYTES:
                refusals.append(f"Button id '{button.id}' is longer than Telegram's {CALLBACK_DATA_MAX_BYTES} "
                                "bytes of callback data.")
        return refusals


def _file_call(chat_id: str, media: Media) -> OutboundCall:
    if media.type not in _FILE_METHODS:
        raise InvalidParamsError(f"Telegram cannot send an attachment of type '{media.type}'.",
                                 data={"param": "attachment_type"})
    method, field = _FILE_METHODS[media.type]
    return OutboundCall(method, {"chat_id": chat_id, field: media.url})


def _failure(code: int, description: str) -> str:
    """Why Telegram refused for good, in the words ``delivery_failed`` uses."""
    said = description.lower()
    if "blocked" in said:
        return BLOCKED
    if "too long" in said:
        return TOO_LONG
    if code == 403 or "chat not found" in said or "deactivated" in said:
        return UNREACHABLE
    return OTHER


def answer_callback(callback_query_id: str, text: str | None = None) -> OutboundCall:
    """Stops the spinner a pressed inline button shows until the bot answers (with a notice: ``text``)."""
    payload = {"callback_query_id": callback_query_id}
    if text:
        payload["text"] = text
    return OutboundCall("answerCallbackQuery", payload)


def _call(http: OutboundHttp, api_url: str, token: str, method: str, payload: dict[str, Any], *,
          what: str = "the bot_token", param: str = "settings.bot_token") -> Any:
    response = call(http, Telegram.name, _http_request(api_url, token, method, payload))
    answer = _answer_of(response)
    if answer is None or (answer.get("ok") is not True and response.status >= 500):
        raise unavailable(Telegram.name, response)
    if answer.get("ok") is True:
        return answer.get("result")
    code = as_int(answer.get("error_code")) or response.status
    if code == 429:
        wait = as_int(as_dict(answer.get("parameters")).get("retry_after"))
        raise MessengerUnavailableError(f"{Telegram.name} asks to wait {wait or 'a while'} seconds before "
                                        "the next call; nothing was changed, try again then.")
    if code in (401, 404):                   # Telegram's answers to an unknown or malformed token
        what, param = "the bot_token", "settings.bot_token"
    raise refused(Telegram.name, param, what, answer.get("description"), [token])


def _http_request(api_url: str, token: str, method: str, payload: dict[str, Any]) -> HttpRequest:
    return HttpRequest("POST", f"{api_url.rstrip('/')}/bot{token}/{method}",
                       {"Content-Type": "application/json"},
                       json.dumps(payload, ensure_ascii=False).encode("utf-8"))


def _answer_of(response: OutboundResponse) -> dict[str, Any] | None:
    """A Bot API answer (an object with a boolean ``ok``), else None."""
    answer = answer_object(response)
    return answer if answer is not None and isinstance(answer.get("ok"), bool) else None
