"""A local server that speaks WhatsApp's Cloud API (``/v21.0/<phone_number_id>`` and ``.../messages``)
and calls the webhook the way Meta does: the ``hub.*`` handshake when the webhook is configured, and
notifications signed with ``X-Hub-Signature-256: sha256=<HMAC of the body with the app secret>``.

    with FakeWhatsApp() as fake:
        number, token = fake.add_number("Acme")
        fake.configure_webhook(url, verify_token)          # what one does in Meta's dashboard
        fake.deliver(fake.notification(number, messages=[fake.text_message("4915112345", "hi")]))

Message templates: ``approve_template(name, language, params)``; a ``type: template`` message is
checked against the approved ones (132001 unknown name or language, 132000 wrong number of
parameters) and is sent even when the customer's window is closed.

Scriptable: ``close_window(wa_id)`` (131047 when sending; ``window_mode="status"`` accepts the send and
reports a ``failed`` status instead, as Meta often does), ``rate_limit_next(code)`` (130429, 80007),
``fail_next(status)`` (5xx), ``delay_next``.
"""
from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Sequence
from typing import Any

import requests

from tests.fakes.server import FakeServer, Limiter, Recorded, Reply, encode
from tests.fakes.viber import signature

WINDOW_CLOSED = {"code": 131047, "title": "Re-engagement message", "message": "Re-engagement message",
                 "error_data": {"details": "Message failed to send because more than 24 hours have passed "
                                           "since the customer last replied to this number."}}
RATE_LIMITS = {130429: ("Rate limit hit", "Cloud API message throughput has been reached."),
               80007: ("Rate limit issues", "The WhatsApp Business Account has reached its rate limit.")}


def graph_error(http_status: int, code: int, message: str, details: str | None = None, **more: Any) -> Reply:
    error: dict[str, Any] = {"message": message, "type": "OAuthException", "code": code,
                             "fbtrace_id": secrets.token_urlsafe(12), **more}
    if details:
        error["error_data"] = {"messaging_product": "whatsapp", "details": details}
    return Reply(http_status, {"error": error})


class FakeWhatsApp(FakeServer):
    label = "whatsapp"
    api_prefix = "/v21.0"

    def __init__(self, port: int = 0, *, app_secret: str | None = None, window_mode: str = "error"):
        super().__init__(port)
        self.app_secret = app_secret or secrets.token_hex(16)
        self.window_mode = window_mode                      # "error" (131047 at once) or "status"
        self.numbers: dict[str, dict[str, Any]] = {}        # phone_number_id -> number info + access token
        self.sent: list[dict[str, Any]] = []
        self.closed_windows: set[str] = set()
        self.callback_url: str | None = None
        self.pending_statuses: list[dict[str, Any]] = []    # failed statuses to deliver (window_mode "status")
        self.media: dict[str, dict[str, Any]] = {}           # media id -> {content, mime_type, number}
        self._ids = itertools.count(100_000_000_000_000)
        self.sent_times: list[float] = []                   # when each of ``sent`` was taken
        self.limiter: Limiter | None = None
        self.per_number, self.per_pair = 80.0, 1.0
        self.read_marks: list[dict[str, str]] = []          # messages the business marked as read
        self.templates: dict[tuple[str, str], int] = {}     # (name, language) -> number of body parameters

    # --- setup and scripting -----------------------------------------------------------------------

    def add_number(self, verified_name: str = "Acme Support") -> tuple[str, str]:
        number_id = str(next(self._ids))
        token = "EAAG" + secrets.token_urlsafe(40)
        self.numbers[number_id] = {"id": number_id, "verified_name": verified_name, "quality_rating": "GREEN",
                                   "display_phone_number": f"+1 555-{number_id[-7:-4]}-{number_id[-4:]}",
                                   "access_token": token}
        return number_id, token

    def channel_settings(self, number_id: str, access_token: str | None = None,
                         verify_token: str = "my-verify-token") -> dict[str, str]:
        """The ``settings`` of a Baton channel for this number (its own token unless one is given)."""
        return {"phone_number_id": number_id, "access_token": access_token or self.numbers[number_id]["access_token"],
                "app_secret": self.app_secret, "verify_token": verify_token}

    def add_media(self, number_id: str, content: bytes, mime_type: str = "image/jpeg") -> str:
        """A file a customer sent to the number: its media id (``GET /<id>`` gives its URL)."""
        media_id = str(next(self._ids))
        self.media[media_id] = {"content": content, "mime_type": mime_type, "number": number_id}
        return media_id

    def enforce_limits(self, per_number: float = 80.0, per_pair: float = 1.0) -> Limiter:
        """From now on, messages over these rates are refused: 130429 for the number's throughput,
        131056 for the pair rate (one business number to one customer)."""
        self.per_number, self.per_pair = per_number, per_pair
        self.limiter = Limiter()
        return self.limiter

    def approve_template(self, name: str, language: str = "en_US", params: int = 0) -> None:
        self.templates[(name, language)] = params

    def close_window(self, wa_id: str) -> None:
        self.closed_windows.add(wa_id)

    def rate_limit_next(self, code: int = 130429, *, times: int = 1) -> None:
        message, details = RATE_LIMITS[code]
        self.script(graph_error(400 if code == 130429 else 429, code, f"(#{code}) {message}", details),
                    times=times, path_endswith="/messages")

    def fail_next(self, status: int = 500, *, times: int = 1) -> None:
        self.script(graph_error(status, 2, "Service temporarily unavailable", is_transient=True), times=times)

    # --- the Graph API -----------------------------------------------------------------------------

    def respond(self, request: Recorded) -> Reply:
        if request.path.startswith("/whatsapp-media/"):
            return self._download(request)
        parts = request.path.removeprefix(self.api_prefix + "/").split("/")
        if len(parts) == 1 and parts[0] in self.media and request.method == "GET":
            return self._media_url(parts[0], request)
        if not request.path.startswith(self.api_prefix + "/") or len(parts) > 2:
            return graph_error(400, 100, "Unknown path components")
        number = self.numbers.get(parts[0])
        auth = request.header("Authorization") or ""
        if not auth.startswith("Bearer ") or not any(n["access_token"] == auth[7:] for n in self.numbers.values()):
            return graph_error(401, 190, "Invalid OAuth access token - Cannot parse access token")
        if number is None or number["access_token"] != auth[7:]:
            return graph_error(400, 100, f"Unsupported get request. Object with ID '{parts[0]}' does not exist, "
                               "cannot be loaded due to missing permissions, or does not support this operation.",
                               error_subcode=33)
        if len(parts) == 1 and request.method == "GET":
            return Reply(200, {key: value for key, value in number.items() if key != "access_token"})
        if parts[1:] == ["messages"] and request.method == "POST":
            with self._lock:
                return self._send(parts[0], request)
        return graph_error(400, 100, "Unsupported request")

    def _owner_token(self, media_id: str) -> str:
        return self.numbers[self.media[media_id]["number"]]["access_token"]

    def _media_url(self, media_id: str, request: Recorded) -> Reply:
        """``GET /<media id>``: a short-lived URL, for the owning business's token only."""
        if request.header("Authorization") != f"Bearer {self._owner_token(media_id)}":
            return graph_error(401, 190, "Invalid OAuth access token - Cannot parse access token")
        media = self.media[media_id]
        return Reply(200, {"messaging_product": "whatsapp", "id": media_id, "mime_type": media["mime_type"],
                           "file_size": len(media["content"]), "sha256": "0" * 64,
                           "url": f"{self.url}/whatsapp-media/{media_id}?ext=1&hash={secrets.token_hex(6)}"})

    def _download(self, request: Recorded) -> Reply:
        """The media URL: the bytes, only with the bearer token (Meta answers 401 without it)."""
        media_id = request.path.removeprefix("/whatsapp-media/")
        if media_id not in self.media:
            return Reply(404, b"Not Found")
        if request.header("Authorization") != f"Bearer {self._owner_token(media_id)}":
            return Reply(401, b"Unauthorized")
        media = self.media[media_id]
        return Reply(200, media["content"], {"Content-Type": media["mime_type"]})

    def _send(self, number_id: str, request: Recorded) -> Reply:
        try:
            params = json.loads(request.body)
        except ValueError:
            return graph_error(400, 100, "(#100) Invalid parameter")
        if not isinstance(params, dict) or params.get("messaging_product") != "whatsapp":
            return graph_error(400, 100, "(#100) The parameter messaging_product is required.")
        if params.get("status") == "read":                  # marking a received message as read
            if not isinstance(params.get("message_id"), str) or not params["message_id"].startswith("wamid."):
                return graph_error(400, 100, "(#100) Invalid parameter", "message_id is not a valid wamid")
            self.read_marks.append({"message_id": params["message_id"], "phone_number_id": number_id})
            return Reply(200, {"success": True})
        to = params.get("to")
        if not isinstance(to, str) or not to:
            return graph_error(400, 131008, "(#131008) Required parameter is missing", "to is required")
        problem = _content_problem(params)
        if problem:
            return graph_error(400, 131009, "(#131009) Parameter value is not valid", problem)
        if params.get("type") == "template":
            template_error = self._template_problem(params["template"])
            if template_error:
                return template_error
        elif to in self.closed_windows and self.window_mode == "error":
            return graph_error(400, 131047, "(#131047) Re-engagement message", WINDOW_CLOSED["error_data"]["details"])
        now = time.time()
        if self.limiter is not None:
            if self.limiter.take([(number_id, self.per_number, self.per_number)], now, tolerance=0.1):
                return graph_error(400, 130429, "(#130429) Rate limit hit",
                                   "Cloud API message throughput has been reached.")
            if self.limiter.take([(f"{number_id}:{to}", self.per_pair, 1.0)], now):
                return graph_error(400, 131056, "(#131056) (Business Account, Consumer Account) pair rate limit hit",
                                   "Message failed to send because there were too many messages sent from this "
                                   "phone number to the same phone number in a short period of time.")
        wamid = f"wamid.HBgL{secrets.token_urlsafe(24)}"
        self.sent.append({**params, "wamid": wamid, "phone_number_id": number_id})
        self.sent_times.append(now)
        if to in self.closed_windows and params.get("type") != "template":
            self.pending_statuses.append(self.status(wamid, "failed", to, errors=[WINDOW_CLOSED]))
        return Reply(200, {"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to}],
                           "messages": [{"id": wamid}]})

    def _template_problem(self, template: dict[str, Any]) -> Reply | None:
        key = (template.get("name"), (template.get("language") or {}).get("code"))
        if key not in self.templates:
            return graph_error(404, 132001, "(#132001) Template name does not exist in the translation",
                               f"template name ({key[0]}) does not exist in {key[1]}")
        values = [p for c in template.get("components") or [] if c.get("type") == "body" for p in c["parameters"]]
        if len(values) != self.templates[key] or any(p.get("type") != "text" or not isinstance(p.get("text"), str)
                                                      or not p["text"].strip() for p in values):
            return graph_error(400, 132000, "(#132000) Number of parameters does not match the expected number "
                               "of params", f"body: number of localizable_params ({len(values)}) does not match "
                               f"the expected number of params ({self.templates[key]})")
        return None

    # --- the webhook, as Meta calls it -------------------------------------------------------------

    def configure_webhook(self, url: str, verify_token: str) -> bool:
        """Meta's dashboard check: GET with hub.mode/verify_token/challenge; kept when the challenge comes back."""
        challenge = str(secrets.randbelow(10**9))
        answer = requests.get(url, params={"hub.mode": "subscribe", "hub.verify_token": verify_token,
                                           "hub.challenge": challenge}, timeout=10)
        if answer.status_code == 200 and answer.text == challenge:
            self.callback_url = url
            return True
        return False

    def deliver(self, notification: dict[str, Any], *, app_secret: str | None = None,
                url: str | None = None) -> requests.Response:
        body = encode(notification)
        return self.post(url or self.callback_url, body,
                         {"X-Hub-Signature-256": "sha256=" + signature(app_secret or self.app_secret, body)})

    def notification(self, number_id: str, *, messages: Sequence[dict] = (), statuses: Sequence[dict] = (),
                     names: dict[str, str] | None = None) -> dict[str, Any]:
        """One entry with one ``messages`` change; ``names`` maps wa_id -> profile name (contacts)."""
        number = self.numbers.get(number_id, {"display_phone_number": "15550000000"})
        value: dict[str, Any] = {"messaging_product": "whatsapp", "metadata": {
            "display_phone_number": number["display_phone_number"], "phone_number_id": number_id}}
        senders = {m["from"] for m in messages}
        if senders:
            value["contacts"] = [{"profile": {"name": (names or {}).get(sender, "Ann")}, "wa_id": sender}
                                 for sender in sorted(senders)]
        if messages:
            value["messages"] = list(messages)
        if statuses:
            value["statuses"] = list(statuses)
        return {"object": "whatsapp_business_account",
                "entry": [{"id": "102290129340398", "changes": [{"value": value, "field": "messages"}]}]}

    @staticmethod
    def account_update(waba_id: str = "102290129340398") -> dict[str, Any]:
        """A notification of another field than ``messages`` (no number in it), as Meta sends for the
        business account, templates, quality ..."""
        return {"object": "whatsapp_business_account", "entry": [{"id": waba_id, "time": int(time.time()), "changes": [
            {"field": "message_template_status_update", "value": {
                "event": "APPROVED", "message_template_id": 594425479261596, "message_template_name": "order_shipped",
                "message_template_language": "en_US", "reason": "NONE"}}]}]}

    def message(self, wa_id: str, kind: str, **content: Any) -> dict[str, Any]:
        return {"from": wa_id, "id": f"wamid.HBgL{secrets.token_urlsafe(24)}", "timestamp": str(int(time.time())),
                "type": kind, **content}

    def text_message(self, wa_id: str, body: str) -> dict[str, Any]:
        return self.message(wa_id, "text", text={"body": body})

    def button_reply(self, wa_id: str, sent: dict[str, Any], title: str) -> dict[str, Any]:
        """The message Meta sends when the user taps the button ``title`` of the sent message ``sent``."""
        [button] = [b["reply"] for b in sent["interactive"]["action"]["buttons"] if b["reply"]["title"] == title]
        return self.message(wa_id, "interactive", context={"from": "15550000000", "id": sent["wamid"]},
                            interactive={"type": "button_reply", "button_reply": dict(button)})

    @staticmethod
    def status(wamid: str, state: str, recipient: str, **more: Any) -> dict[str, Any]:
        return {"id": wamid, "status": state, "timestamp": str(int(time.time())), "recipient_id": recipient, **more}


def _content_problem(params: dict[str, Any]) -> str | None:
    kind = params.get("type", "text")
    if kind == "template":
        template = params.get("template")
        ok = isinstance(template, dict) and isinstance(template.get("name"), str) and \
            isinstance((template.get("language") or {}).get("code"), str)
        return None if ok else "template needs a name and language.code"
    if kind == "text":
        body = (params.get("text") or {}).get("body")
        return None if isinstance(body, str) and 0 < len(body) <= 4096 else "text.body must be 1 to 4096 characters"
    if kind in ("image", "document"):
        media = params.get(kind) or {}
        link, caption = media.get("link"), media.get("caption")
        if not isinstance(link, str) or not link.startswith(("http://", "https://")):
            return f"{kind}.link must be an http(s) URL"
        if caption is not None and (not isinstance(caption, str) or len(caption) > 1024):
            return f"{kind}.caption must be at most 1024 characters"
        return None
    if kind != "interactive":
        return f"unsupported type {kind}"
    interactive = params.get("interactive") or {}
    text = (interactive.get("body") or {}).get("text")
    if interactive.get("type") != "button" or not isinstance(text, str) or not 0 < len(text) <= 1024:
        return "interactive.body.text must be 1 to 1024 characters"
    buttons = (interactive.get("action") or {}).get("buttons") or []
    titles = [(b.get("reply") or {}).get("title") for b in buttons]
    ids = [(b.get("reply") or {}).get("id") for b in buttons]
    if not 1 <= len(buttons) <= 3 or len(set(titles)) != len(titles):
        return "between 1 and 3 buttons with unique titles are allowed"
    if any(not isinstance(t, str) or not 0 < len(t) <= 20 for t in titles):
        return "Button title length invalid. Min length: 1, Max length: 20"
    if any(not isinstance(i, str) or not 0 < len(i) <= 256 for i in ids):
        return "Button id length invalid. Max length: 256"
    return None
