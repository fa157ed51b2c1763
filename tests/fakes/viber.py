"""A local server that speaks Viber's REST Bot API (``<api_url>/<method>`` = ``/pa/...``) and calls the
webhook the way Viber does: the ``webhook`` check inside ``set_webhook`` (registration fails unless it
answers 200) and every callback signed with ``X-Viber-Content-Signature``.

    with FakeViber() as fake:
        token = fake.add_account("Acme")
        ... connect with api_url=fake.api_url ...
        fake.deliver(token, fake.message_event("user-1", "hello"))

Scriptable: ``unsubscribe(user_id)`` (status 6 receiverNotSubscribed), ``fail_next(status, message)``
(another non-zero status, still HTTP 200 as Viber does), ``http_error_next(status)``, ``delay_next``,
``require_https`` (set_webhook refuses http URLs).
"""
from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import secrets
import time
from typing import Any

import requests

from tests.fakes.server import FakeServer, Limiter, Recorded, Reply, encode

HOSTNAME = "SN-CHAT-01_"
REQUEST_MAX_BYTES = 30 * 1024      # "The maximum total JSON size of the request is 30kb"
KEYBOARD_MAX_ROWS = 24
EVENT_TYPES = ("delivered", "seen", "failed", "subscribed", "unsubscribed", "conversation_started")


def status(code: int, message: str, **more: Any) -> Reply:
    return Reply(200, {"status": code, "status_message": message, **more})


def signature(auth_token: str, body: bytes) -> str:
    return hmac.new(auth_token.encode(), body, hashlib.sha256).hexdigest()


class FakeViber(FakeServer):
    label = "viber"
    api_prefix = "/pa"

    def __init__(self, port: int = 0, *, require_https: bool = False):
        super().__init__(port)
        self.require_https = require_https
        self.accounts: dict[str, dict[str, Any]] = {}        # auth token -> account info
        self.webhooks: dict[str, dict[str, Any]] = {}        # auth token -> set_webhook parameters
        self.sent: list[dict[str, Any]] = []
        self.unsubscribed: set[str] = set()
        self.webhook_checks: list[requests.Response | Exception] = []
        self.media: dict[str, bytes] = {}                      # path -> content (Viber's media URLs)
        self._tokens = itertools.count(5_000_000_000_000_000_000)
        self.sent_times: list[float] = []
        self.limiter: Limiter | None = None
        self.per_account = 50.0

    # --- setup and scripting -----------------------------------------------------------------------

    def add_account(self, name: str = "Acme Support") -> str:
        token = f"{secrets.token_hex(8)}-{secrets.token_hex(8)}-{secrets.token_hex(8)}"
        self.accounts[token] = {"id": f"pa:{next(self._tokens)}", "name": name, "uri": name.lower().replace(" ", ""),
                                "icon": "https://example.com/icon.png", "country": "DE", "subscribers_count": 0}
        return token

    def add_media(self, content: bytes, name: str = "photo.jpg") -> str:
        """A file a user sent: the URL Viber's ``media`` field gives (no credentials needed, expires)."""
        path = f"/viber-media/{secrets.token_hex(8)}/{name}"
        self.media[path] = content
        return self.url + path

    def enforce_limits(self, per_account: float = 50.0) -> Limiter:
        """From now on, send_message over this rate gets status 12 tooManyRequests (Viber's rate control)."""
        self.per_account = per_account
        self.limiter = Limiter()
        return self.limiter

    def unsubscribe(self, user_id: str) -> None:
        self.unsubscribed.add(user_id)

    def fail_next(self, code: int, message: str, *, times: int = 1, method: str = "send_message") -> None:
        self.script(status(code, message), times=times, path_endswith=f"/{method}")

    def http_error_next(self, http_status: int = 503, *, times: int = 1, method: str = "") -> None:
        self.script(Reply(http_status, b"Service Unavailable"), times=times,
                    path_endswith=f"/{method}" if method else "")

    # --- the REST API ------------------------------------------------------------------------------

    def respond(self, request: Recorded) -> Reply:
        if request.method == "GET" and request.path in self.media:
            return Reply(200, self.media[request.path], {"Content-Type": "image/jpeg"})
        if not request.path.startswith(self.api_prefix + "/") or request.method != "POST":
            return Reply(404, b"Not Found")
        token = request.header("X-Viber-Auth-Token")
        if token not in self.accounts:
            return status(2, "invalidAuthToken")
        try:
            params = json.loads(request.body or b"{}")
        except ValueError:
            return status(3, "badData")
        if not isinstance(params, dict):
            return status(3, "badData")
        method = request.path[len(self.api_prefix) + 1:]
        if method == "set_webhook":
            return self._set_webhook(token, params)     # calls the webhook: not under the lock
        with self._lock:
            if method == "get_account_info":
                hook = self.webhooks.get(token, {})
                return status(0, "ok", **self.accounts[token], webhook=hook.get("url", ""),
                              event_types=hook.get("event_types", []))
            if method == "send_message":
                return self._send_message(token, params)
        return Reply(404, b"Not Found")

    def _set_webhook(self, token: str, params: dict[str, Any]) -> Reply:
        url = params.get("url")
        if url == "":
            with self._lock:
                self.webhooks.pop(token, None)
            return status(0, "ok")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return status(1, "invalidUrl")
        if self.require_https and not url.startswith("https://"):
            return status(1, "invalidUrl")
        event_types = params.get("event_types", list(EVENT_TYPES))
        if not isinstance(event_types, list) or any(e not in EVENT_TYPES for e in event_types):
            return status(3, "badData")
        check = {"event": "webhook", "timestamp": int(time.time() * 1000), "chat_hostname": HOSTNAME,
                 "message_token": next(self._tokens)}
        try:
            answer = self.post(url, encode(check), {"X-Viber-Content-Signature": signature(token, encode(check))},
                               timeout=5.0)
        except requests.RequestException as exc:
            self.webhook_checks.append(exc)
            return status(1, "invalidUrl")
        self.webhook_checks.append(answer)
        if answer.status_code != 200:
            return status(1, "invalidUrl")
        with self._lock:
            self.webhooks[token] = {"url": url, "event_types": event_types,
                                    "send_name": params.get("send_name"), "send_photo": params.get("send_photo")}
        return status(0, "ok", chat_hostname=HOSTNAME, event_types=event_types)

    def _send_message(self, token: str, params: dict[str, Any]) -> Reply:
        receiver = params.get("receiver")
        sender = params.get("sender")
        if not isinstance(receiver, str) or not receiver or not isinstance(sender, dict):
            return status(4, "missingData")
        name = sender.get("name")
        if not isinstance(name, str) or not 0 < len(name) <= 28 or not _content_valid(params):
            return status(3, "badData")
        if len(encode(params)) > REQUEST_MAX_BYTES or not _keyboard_valid(params):
            return status(3, "badData")
        if receiver in self.unsubscribed:
            return status(6, "receiverNotSubscribed")
        now = time.time()
        if self.limiter is not None and self.limiter.take([(token, self.per_account, self.per_account)], now):
            return status(12, "tooManyRequests")
        message_token = next(self._tokens)
        self.sent.append({**params, "message_token": message_token, "token": token})
        self.sent_times.append(now)
        return status(0, "ok", message_token=message_token, chat_hostname=HOSTNAME, billing_status=1)

    # --- callbacks, sent the way Viber sends them --------------------------------------------------

    def deliver(self, token: str, callback: dict[str, Any], *, signed_with: str | None = None) -> requests.Response:
        """POST ``callback`` to the account's webhook, signed with its token (or ``signed_with``)."""
        body = encode(callback)
        return self.post(self.webhooks[token]["url"], body,
                         {"X-Viber-Content-Signature": signature(signed_with or token, body)})

    def event(self, event: str, **fields: Any) -> dict[str, Any]:
        return {"event": event, "timestamp": int(time.time() * 1000), "chat_hostname": HOSTNAME,
                "message_token": next(self._tokens), **fields}

    def message_event(self, user_id: str, text: str | None = None, *, name: str = "Ann",
                      **message: Any) -> dict[str, Any]:
        """A ``message`` callback; without ``type`` it is a text message."""
        body = {"type": "text", **({"text": text} if text is not None else {}), **message}
        sender = {"id": user_id, "name": name, "avatar": "https://example.com/a.jpg", "country": "DE",
                  "language": "de", "api_version": 10}
        return self.event("message", sender=sender, message=body, silent=False)

    def pressed(self, user_id: str, sent: dict[str, Any], title: str) -> dict[str, Any]:
        """The reply Viber sends when the user presses the button ``title`` of the sent message ``sent``."""
        [button] = [b for b in sent["keyboard"]["Buttons"] if b["ActionBody"] == title]
        return self.message_event(user_id, button["ActionBody"], tracking_data=sent.get("tracking_data"))


def _content_valid(params: dict[str, Any]) -> bool:
    """text (1-7000 characters), picture (``media`` JPEG/PNG URL, ``text`` of at most 768), file
    (``media``, ``size``, ``file_name`` of at most 256), as Viber's send_message takes them."""
    kind, text, media = params.get("type"), params.get("text"), params.get("media")
    if kind == "text":
        return isinstance(text, str) and 0 < len(text) <= 7000
    if not isinstance(media, str) or not media.startswith(("http://", "https://")):
        return False
    if kind == "picture":
        return isinstance(text, str) and len(text) <= 768
    if kind == "file":
        name, size = params.get("file_name"), params.get("size")
        return isinstance(name, str) and 0 < len(name) <= 256 and isinstance(size, int) and 0 < size <= 50 * 2**20
    return False


def _keyboard_valid(params: dict[str, Any]) -> bool:
    tracking = params.get("tracking_data")
    if tracking is not None and (not isinstance(tracking, str) or len(tracking) > 4000):
        return False
    keyboard = params.get("keyboard")
    if keyboard is None:
        return True
    if not isinstance(params.get("min_api_version"), int):
        return False
    buttons = keyboard.get("Buttons") if isinstance(keyboard, dict) else None
    if keyboard.get("Type") != "keyboard" or not isinstance(buttons, list) or not buttons:
        return False
    columns = [button.get("Columns", 6) if isinstance(button, dict) else 0 for button in buttons]
    if _rows(columns) > KEYBOARD_MAX_ROWS:
        return False
    for button in buttons:
        if not isinstance(button, dict) or len(str(button.get("Text", ""))) > 250:
            return False
        if not 1 <= button.get("Columns", 6) <= 6 or not 1 <= button.get("Rows", 1) <= 2:
            return False
        if button.get("ActionType", "reply") == "reply" and not button.get("ActionBody"):
            return False
    return True


def _rows(columns: list[int]) -> int:
    """Rows a keyboard's buttons fill, 6 columns to a row, laid out in order."""
    rows, used = 0, 6
    for width in columns:
        if used + width > 6:
            rows, used = rows + 1, 0
        used += width
    return rows
