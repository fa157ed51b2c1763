"""The paths bench/chat_latency.py measures, each a way a customer message goes in and its answer
comes out: how the server is configured, the channel and process it needs, how a message is posted,
and where the answer arrives (with its arrival time).

* ``send_message``: web-chat inbound POST -> bench/bpmn/chat_echo.bpmn -> the answer POSTed to a
  local receiver (tests/receiver.py).
* ``ai``: the same through bench/bpmn/chat_ai_echo.bpmn and an instant local OpenAI-compatible model.
* ``telegram``: a Telegram update POSTed to /webhooks/telegram the way Telegram does it (the
  channel's secret token; the fake Bot API, tests/fakes/telegram.py, registered the webhook when the
  channel was created) -> chat_echo.bpmn bound to the Telegram channel -> ``sendMessage`` at the fake.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fake_openai import FakeOpenAI
from tests.fakes.server import encode
from tests.fakes.telegram import FakeTelegram
from tests.receiver import Receiver

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Inbound:
    """How to post one customer message: ``body(chat_id, text)`` to ``url`` with ``headers``."""

    url: str
    headers: dict[str, str]
    body: Callable[[str, str], bytes]
    accepted_status: int


class WebchatPath:
    """The answer of a ``send_message`` step to a web-chat message (the baseline)."""

    name, bpmn = "send_message", ROOT / "bench" / "bpmn" / "chat_echo.bpmn"
    description = "web-chat POST -> send_message -> the answer at a local receiver"

    def start(self) -> dict[str, str]:
        """Start what the path needs besides the server; the server's extra environment."""
        self.receiver = Receiver().start()
        return {}

    def connect(self, admin, server) -> Inbound:
        channel = admin.call("channel.create", type="webchat", name=f"bench-{uuid.uuid4().hex[:8]}",
                             webhook_url=f"{self.receiver.url}/chat")
        deploy(admin, self, channel)
        key = admin.call("apikey.create", name="bench chat backend", permissions=["conversation.send"])["api_key"]
        return Inbound(f"{server.base_url}/channels/webchat/{channel['config_id']}/inbound",
                       {"X-API-Key": key, "Content-Type": "application/json"}, _webchat_body, 202)

    def arrivals(self) -> list[Any]:
        """Every answer so far, in arrival order (``.at``: time.time() on arrival; ``.json()``)."""
        with self.receiver._lock:
            return list(self.receiver.requests)

    def chat_id(self, prefix: str, number: int) -> str:
        return f"{prefix}-{number:05d}"

    def expected(self, chat_id: str, text: str | None) -> bool:
        return text == f"Echo: hello {chat_id}"

    def stop(self) -> None:
        self.receiver.stop()


class AiPath(WebchatPath):
    """The answer of an ``ai_chat`` step (max_turns = 1) written by an instant local model."""

    name, bpmn = "ai", ROOT / "bench" / "bpmn" / "chat_ai_echo.bpmn"
    description = "web-chat POST -> ai_chat (instant local model) -> the answer at a local receiver"

    def start(self) -> dict[str, str]:
        super().start()
        self.model = FakeOpenAI().start()
        return {"BATON_AI_BASE_URL": self.model.base_url, "BATON_AI_MODEL": "bench-instant"}

    def expected(self, chat_id: str, text: str | None) -> bool:
        return bool(text) and text.startswith("AI #") and text.endswith(f": hello {chat_id}")

    def stop(self) -> None:
        super().stop()
        self.model.stop()


class TelegramPath(WebchatPath):
    """The same send_message answer to a Telegram update, sent back with ``sendMessage``."""

    name = "telegram"
    description = "Telegram update -> send_message -> sendMessage at the fake Bot API"

    def start(self) -> dict[str, str]:
        self.fake = FakeTelegram().start()
        return {"BATON_TELEGRAM_API_URL": self.fake.api_url}

    def connect(self, admin, server) -> Inbound:
        token = self.fake.add_bot("Bench Bot")
        channel = admin.call("channel.create", type="telegram", name=f"bench-{uuid.uuid4().hex[:8]}",
                             settings={"bot_token": token})
        deploy(admin, self, channel)
        hook = self.fake.webhooks[token]
        fake = self.fake

        def update(chat_id: str, text: str) -> bytes:
            return encode(fake.text_update(int(chat_id), text))

        return Inbound(hook["url"], {"X-Telegram-Bot-Api-Secret-Token": hook["secret_token"],
                                     "Content-Type": "application/json"}, update, 200)

    def arrivals(self) -> list[Any]:
        return self.fake.requests_to("/sendMessage")

    def chat_id(self, prefix: str, number: int) -> str:
        # Telegram chat ids are integers: the prefix picks a block of them.
        return str(int.from_bytes(prefix.encode()[:4].ljust(4, b"\0"), "big") * 100_000 + number)

    def stop(self) -> None:
        self.fake.stop()


def deploy(admin, path: WebchatPath, channel: dict) -> None:
    xml = path.bpmn.read_text(encoding="utf-8").replace('name="trigger" value="webchat"',
                                                        f'name="trigger" value="{channel["type"]}"')
    admin.deploy(xml.replace("__CHANNEL__", channel["name"]), code=f"bench-chat-{path.name.replace('_', '-')}")


def _webchat_body(chat_id: str, text: str) -> bytes:
    return json.dumps({"chat_id": chat_id, "text": text, "user_id": chat_id, "username": "bench"}).encode()


PATHS: dict[str, type[WebchatPath]] = {path.name: path for path in (WebchatPath, AiPath, TelegramPath)}
