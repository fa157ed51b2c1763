"""What the messenger tests share: deploying a chat process on a messenger channel, reading the
deliveries and conversations of one channel, waiting for what a fake received."""
from __future__ import annotations

import random
import uuid

from tests.harness import bpmn
from tests.integration.test_webchat import eventually as eventually  # re-exported: one polling loop for chat tests


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_chat_id() -> int:
    """A Telegram-style chat id no other test uses (the fakes' blocked lists are shared)."""
    return random.randint(10**9, 10**10)


def deploy_on(api, fixture: str, channel: dict, **placeholders: str) -> dict:
    """``tests/bpmn/<fixture>`` with its web-chat start event moved to ``channel`` (its type and name);
    ``placeholders`` fill ``__NAME__`` markers (``buttons="yes:Yes"`` fills ``__BUTTONS__``)."""
    xml = bpmn(fixture).replace('name="trigger" value="webchat"', f'name="trigger" value="{channel["type"]}"')
    for name, value in placeholders.items():
        xml = xml.replace(f"__{name.upper()}__", value)
    return api.deploy(xml.replace("__CHANNEL__", channel["name"]), code=new_name("msg"))


def conversations_of(api, config_id: int) -> list[dict]:
    return [c for c in api.call("conversation.list", per_page=100)["items"] if c["config_id"] == config_id]


def deliveries_of(api, config_id: int) -> list[dict]:
    """The channel's deliveries, oldest first."""
    items = api.call("delivery.list", per_page=100)["items"]
    return sorted((d for d in items if d["channel_id"] == config_id), key=lambda d: d["delivery_id"])


def settled_deliveries(api, config_id: int, count: int, timeout: float = 20.0) -> list[dict]:
    """The channel's deliveries once ``count`` of them are sent or dead."""
    return eventually(lambda: deliveries_of(api, config_id),
                      lambda found: sum(d["status"] in ("sent", "dead") for d in found) >= count, timeout)


def messages_of(api, binding_id: int) -> list[dict]:
    """A conversation's messages, oldest first."""
    return list(reversed(api.call("conversation.messages", binding_id=binding_id, per_page=100)["items"]))
