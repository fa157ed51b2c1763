"""A local server that speaks Telegram's Bot API (``/bot<token>/<method>``) and sends updates the way
Telegram does (to the registered webhook, with ``X-Telegram-Bot-Api-Secret-Token``).

    with FakeTelegram() as fake:
        token = fake.add_bot("Support Bot")
        ... connect with api_url=fake.api_url ...
        fake.deliver(token, fake.text_update(42, "hello"))

Limits (``enforce_limits``): like Telegram, at most about 30 messages per second per bot, one per
second per chat and 20 per minute per group (negative chat ids); over them, 429 with
``parameters.retry_after``. ``sent_times`` records when each accepted message was taken.
``hold()`` / ``release()`` (FakeServer): sendMessage calls wait, and one whose caller hung up
meanwhile is never taken, as Telegram never reads a request cut short.

Scriptable: ``block(chat_id)`` (403 "bot was blocked by the user"), ``forget_chat(chat_id)`` (400 "chat
not found"), ``rate_limit_next(retry_after)`` (429 with ``parameters.retry_after``), ``fail_next(status)``
(5xx), ``delay_next(seconds)``, ``require_https`` (setWebhook refuses http URLs, as Telegram does).
"""
from __future__ import annotations

import itertools
import json
import re
import secrets
import time
from typing import Any
from urllib.parse import parse_qsl

import requests

import math

from tests.fakes.server import FakeServer, Limiter, Recorded, Reply, encode

_PATH = re.compile(r"/bot([^/]+)/([A-Za-z]+)")
_FILE_PATH = re.compile(r"/file/bot([^/]+)/(.+)")
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


def error(code: int, description: str, **parameters: Any) -> Reply:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return Reply(code, body)


def ok(result: Any, description: str | None = None) -> Reply:
    body = {"ok": True, "result": result}
    if description:
        body["description"] = description
    return Reply(200, body)


class FakeTelegram(FakeServer):
    label = "telegram"

    def __init__(self, port: int = 0, *, require_https: bool = False):
        super().__init__(port)
        self.require_https = require_https
        self.bots: dict[str, dict[str, Any]] = {}           # token -> getMe result
        self.webhooks: dict[str, dict[str, Any]] = {}       # token -> setWebhook parameters
        self.sent: list[dict[str, Any]] = []                 # accepted sendMessage parameters (+ message_id)
        self.blocked: set[str] = set()
        self.unknown_chats: set[str] = set()
        self.files: dict[str, tuple[str, bytes]] = {}        # file_id -> (file_path, content)
        self.answered: list[dict[str, Any]] = []             # accepted answerCallbackQuery parameters
        self.sent_times: list[float] = []                    # when each of ``sent`` was taken
        self.limiter: Limiter | None = None
        self.limits = (30.0, 1.0, 20 / 60)                   # per bot and per chat per second, per group
        self._ids = itertools.count(1)
        self._update_ids = itertools.count(10_000)

    # --- setup and scripting -----------------------------------------------------------------------

    def add_bot(self, first_name: str = "Support Bot", username: str | None = None) -> str:
        bot_id = 7_000_000_000 + next(self._ids)
        token = f"{bot_id}:{secrets.token_urlsafe(26)}"
        self.bots[token] = {"id": bot_id, "is_bot": True, "first_name": first_name,
                            "username": username or f"support_{bot_id}_bot"}
        return token

    def add_file(self, content: bytes, file_path: str = "photos/file_1.jpg") -> str:
        """A file a customer sent: its ``file_id`` (getFile answers its path, /file/bot<token>/ serves it)."""
        file_id = "AgACAgIAAxkBAAI" + secrets.token_urlsafe(24)
        self.files[file_id] = (file_path, content)
        return file_id

    def enforce_limits(self, per_bot: float = 30.0, per_chat: float = 1.0, per_group_per_min: float = 20.0) -> Limiter:
        """From now on, sendMessage over these rates is refused with 429 (``limiter.refused`` counts)."""
        self.limits = (per_bot, per_chat, per_group_per_min / 60)
        self.limiter = Limiter()
        return self.limiter

    def block(self, chat_id: int | str) -> None:
        self.blocked.add(str(chat_id))

    def forget_chat(self, chat_id: int | str) -> None:
        self.unknown_chats.add(str(chat_id))

    def rate_limit_next(self, retry_after: int, *, times: int = 1, method: str = "sendMessage") -> None:
        self.script(error(429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after),
                    times=times, path_endswith=f"/{method}")

    def fail_next(self, status: int = 502, *, times: int = 1, method: str = "") -> None:
        body = b"<html><body>Bad Gateway</body></html>" if status == 502 else \
            {"ok": False, "error_code": status, "description": "Internal Server Error"}
        self.script(Reply(status, body), times=times, path_endswith=f"/{method}" if method else "")

    # --- the Bot API -------------------------------------------------------------------------------

    def respond(self, request: Recorded) -> Reply:
        download = _FILE_PATH.fullmatch(request.path)
        if download:
            return self._download(*download.groups())
        match = _PATH.fullmatch(request.path)
        if not match:
            return error(404, "Not Found")
        token, method = match.groups()
        if token not in self.bots:
            return error(401, "Unauthorized")
        params = _params(request)
        if params is None:
            return error(400, "Bad Request: can't parse JSON object")
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return error(404, "Not Found: method not found")
        if method == "sendMessage" and not self.wait_at_gate():
            return error(500, "Internal Server Error: the request was cut short")
        with self._lock:
            return handler(token, params)

    def _download(self, token: str, file_path: str) -> Reply:
        """``https://api.telegram.org/file/bot<token>/<file_path>``: the bytes, for the bot's token only."""
        if token not in self.bots:
            return Reply(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
        found = next((content for path, content in self.files.values() if path == file_path), None)
        if found is None:
            return Reply(404, {"ok": False, "error_code": 404, "description": "Not Found"})
        return Reply(200, found, {"Content-Type": "application/octet-stream"})

    def _api_getFile(self, token: str, params: dict[str, Any]) -> Reply:
        found = self.files.get(str(params.get("file_id") or ""))
        if found is None:
            return error(400, "Bad Request: invalid file_id")
        path, content = found
        if len(content) > 20 * 1024 * 1024:
            return error(400, "Bad Request: file is too big")
        return ok({"file_id": params["file_id"], "file_unique_id": "AQAD" + path[-6:], "file_size": len(content),
                   "file_path": path})

    def _api_getMe(self, token: str, params: dict[str, Any]) -> Reply:
        return ok(self.bots[token])

    def _api_setWebhook(self, token: str, params: dict[str, Any]) -> Reply:
        url = params.get("url") or ""
        if not url:
            self.webhooks.pop(token, None)
            return ok(True, "Webhook was deleted")
        if self.require_https and not url.startswith("https://"):
            return error(400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
        secret = params.get("secret_token")
        if secret is not None and not _SECRET_TOKEN.fullmatch(secret):
            return error(400, "Bad Request: secret token contains unallowed characters")
        allowed = params.get("allowed_updates")
        if isinstance(allowed, str):
            allowed = json.loads(allowed)
        self.webhooks[token] = {"url": url, "secret_token": secret, "allowed_updates": allowed}
        return ok(True, "Webhook was set")

    def _api_deleteWebhook(self, token: str, params: dict[str, Any]) -> Reply:
        existed = self.webhooks.pop(token, None) is not None
        return ok(True, "Webhook was deleted" if existed else "Webhook is already deleted")

    def _api_getWebhookInfo(self, token: str, params: dict[str, Any]) -> Reply:
        hook = self.webhooks.get(token) or {}
        return ok({"url": hook.get("url", ""), "has_custom_certificate": False, "pending_update_count": 0,
                   "allowed_updates": hook.get("allowed_updates") or []})

    def _api_sendMessage(self, token: str, params: dict[str, Any]) -> Reply:
        chat_id = str(params.get("chat_id") or "")
        text = params.get("text")
        if not chat_id:
            return error(400, "Bad Request: chat_id is empty")
        if not isinstance(text, str) or not text.strip():
            return error(400, "Bad Request: message text is empty")
        if len(text.encode("utf-16-le")) // 2 > 4096:
            return error(400, "Bad Request: message is too long")
        if not _buttons_valid(params.get("reply_markup")):
            return error(400, "Bad Request: BUTTON_DATA_INVALID")
        if chat_id in self.unknown_chats:
            return error(400, "Bad Request: chat not found")
        if chat_id in self.blocked:
            return error(403, "Forbidden: bot was blocked by the user")
        now = time.time()
        refused = self._over_limit(token, chat_id, now)
        if refused is not None:
            return refused
        message_id = next(self._ids)
        self.sent.append({**params, "message_id": message_id, "token": token})
        self.sent_times.append(now)
        result = {"message_id": message_id, "from": self.bots[token], "date": int(time.time()),
                  "chat": {"id": _int_or_str(chat_id), "type": "private"}, "text": text}
        if params.get("reply_markup"):
            result["reply_markup"] = params["reply_markup"]
        return ok(result)

    def _over_limit(self, token: str, chat_id: str, now: float) -> Reply | None:
        """Telegram's 429 when a message passes the enforced limits (``enforce_limits``), else None."""
        if self.limiter is None:
            return None
        per_bot, per_chat, per_group = self.limits
        chat_rate = per_group if chat_id.startswith("-") else per_chat
        wait = self.limiter.take([(token, per_bot, per_bot), (f"{token}:{chat_id}", chat_rate, 1.0)], now)
        if wait is None:
            return None
        return error(429, f"Too Many Requests: retry after {math.ceil(wait)}", retry_after=math.ceil(wait))

    def _api_sendPhoto(self, token: str, params: dict[str, Any]) -> Reply:
        return self._send_file(token, params, "photo")

    def _api_sendDocument(self, token: str, params: dict[str, Any]) -> Reply:
        return self._send_file(token, params, "document")

    def _send_file(self, token: str, params: dict[str, Any], field: str) -> Reply:
        """A file by URL: Telegram downloads it (an http(s) URL), the caption is at most 1024 characters."""
        chat_id = str(params.get("chat_id") or "")
        url, caption = params.get(field), params.get("caption")
        if not chat_id:
            return error(400, "Bad Request: chat_id is empty")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return error(400, f"Bad Request: there is no {field} in the request")
        if caption is not None and (not isinstance(caption, str) or len(caption.encode("utf-16-le")) // 2 > 1024):
            return error(400, "Bad Request: message caption is too long")
        if not _buttons_valid(params.get("reply_markup")):
            return error(400, "Bad Request: BUTTON_DATA_INVALID")
        if chat_id in self.blocked:
            return error(403, "Forbidden: bot was blocked by the user")
        now = time.time()
        refused = self._over_limit(token, chat_id, now)
        if refused is not None:
            return refused
        message_id = next(self._ids)
        self.sent.append({**params, "message_id": message_id, "token": token, "text": caption})
        self.sent_times.append(now)
        return ok({"message_id": message_id, "from": self.bots[token], "date": int(time.time()),
                   "chat": {"id": _int_or_str(chat_id), "type": "private"},
                   field: {"file_id": f"sent-{message_id}"}, **({"caption": caption} if caption else {})})

    def _api_answerCallbackQuery(self, token: str, params: dict[str, Any]) -> Reply:
        if not params.get("callback_query_id"):
            return error(400, "Bad Request: query is too old and response timeout expired or query ID is invalid")
        if len(str(params.get("text") or "")) > 200:
            return error(400, "Bad Request: MESSAGE_TOO_LONG")
        self.answered.append({**params, "token": token})
        return ok(True)

    # --- updates, sent the way Telegram sends them -------------------------------------------------

    def deliver(self, token: str, update: dict[str, Any], *, secret_token: str | None = None) -> requests.Response:
        """POST ``update`` to the bot's registered webhook with its secret token (or ``secret_token``)."""
        hook = self.webhooks[token]
        secret = hook.get("secret_token") if secret_token is None else secret_token
        headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret else {}
        return self.post(hook["url"], encode(update), headers)

    def update(self, **content: Any) -> dict[str, Any]:
        """An update with a fresh ``update_id`` and the given content (``message=...``, ...)."""
        return {"update_id": next(self._update_ids), **content}

    def message(self, chat_id: int, first_name: str = "Ann", **fields: Any) -> dict[str, Any]:
        user = {"id": chat_id, "is_bot": False, "first_name": first_name, "language_code": "en"}
        return {"message_id": next(self._ids), "from": user, "date": int(time.time()),
                "chat": {"id": chat_id, "first_name": first_name, "type": "private"}, **fields}

    def text_update(self, chat_id: int, text: str, first_name: str = "Ann") -> dict[str, Any]:
        return self.update(message=self.message(chat_id, first_name, text=text))

    def button_update(self, chat_id: int, button_id: str, keyboard: list[dict[str, str]] | None = None,
                      first_name: str = "Ann", *, message_id: int | None = None, user_id: int | None = None,
                      chat_type: str = "private") -> dict[str, Any]:
        """A pressed inline button; ``keyboard`` ([{"text", "callback_data"}]) is the message's markup,
        ``message_id`` the bot's message it is on (``sent[...]["message_id"]``), ``user_id`` who pressed."""
        message = self.message(chat_id, "Support Bot", text="Choose one")
        message["chat"]["type"] = chat_type
        if message_id is not None:
            message["message_id"] = message_id
        if keyboard is not None:
            message["reply_markup"] = {"inline_keyboard": [[button] for button in keyboard]}
        user = {"id": user_id or chat_id, "is_bot": False, "first_name": first_name}
        return self.update(callback_query={"id": str(next(self._ids) + 4_000_000), "from": user,
                                           "message": message, "chat_instance": "-1", "data": button_id})

    def group_message(self, group_id: int, user_id: int, first_name: str = "Ann", *,
                      chat_type: str = "supergroup", title: str = "Acme customers", **fields: Any) -> dict[str, Any]:
        """A message in a group: the chat is the group (a negative id), ``from`` who wrote it."""
        user = {"id": user_id, "is_bot": False, "first_name": first_name}
        return {"message_id": next(self._ids), "from": user, "date": int(time.time()),
                "chat": {"id": group_id, "title": title, "type": chat_type}, **fields}

    def group_update(self, group_id: int, user_id: int, text: str | None = None, first_name: str = "Ann",
                     **fields: Any) -> dict[str, Any]:
        content = {"text": text} if text is not None else {}
        return self.update(message=self.group_message(group_id, user_id, first_name, **content, **fields))

    def removed_from_group_update(self, group_id: int, status: str = "left") -> dict[str, Any]:
        """``my_chat_member`` when someone removes the bot from a group (``left`` / ``kicked``) or adds it."""
        bot = {"id": 1, "is_bot": True, "first_name": "Support Bot"}
        admin = {"id": 5, "is_bot": False, "first_name": "Admin"}
        return self.update(my_chat_member={
            "chat": {"id": group_id, "title": "Acme customers", "type": "supergroup"}, "from": admin,
            "date": int(time.time()), "old_chat_member": {"user": bot, "status": "member"},
            "new_chat_member": {"user": bot, "status": status}})

    def blocked_update(self, chat_id: int, status: str = "kicked") -> dict[str, Any]:
        """``my_chat_member`` as sent when the user blocks (``kicked``) or unblocks (``member``) the bot."""
        bot = {"id": 1, "is_bot": True, "first_name": "Support Bot"}
        user = {"id": chat_id, "is_bot": False, "first_name": "Ann"}
        return self.update(my_chat_member={
            "chat": {"id": chat_id, "type": "private"}, "from": user, "date": int(time.time()),
            "old_chat_member": {"user": bot, "status": "member" if status == "kicked" else "kicked"},
            "new_chat_member": {"user": bot, "status": status, **({"until_date": 0} if status == "kicked" else {})}})


def _params(request: Recorded) -> dict[str, Any] | None:
    """Parameters the way the Bot API takes them: query string, form fields or a JSON object."""
    params: dict[str, Any] = dict(request.query)
    content_type = (request.header("Content-Type") or "").split(";")[0].strip()
    if request.body and content_type == "application/json":
        try:
            body = json.loads(request.body)
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        params.update(body)
    elif request.body:
        params.update(parse_qsl(request.body.decode("utf-8", "replace")))
    return params


def _buttons_valid(markup: Any) -> bool:
    if markup is None:
        return True
    if isinstance(markup, str):
        markup = json.loads(markup)
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list):
        return False
    for row in rows:
        for button in row if isinstance(row, list) else [None]:
            if not isinstance(button, dict) or not isinstance(button.get("text"), str) or not button["text"]:
                return False
            data = button.get("callback_data")
            if not isinstance(data, str) or not 1 <= len(data.encode("utf-8")) <= 64:
                return False
    return True


def _int_or_str(value: str) -> int | str:
    return int(value) if value.lstrip("-").isdigit() else value
