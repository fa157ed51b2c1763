"""The messenger protocols (Telegram, Viber, WhatsApp): one module each, no database, no engine state.

Each module owns its messenger's wire protocol: the settings it needs, connecting (credential check and
webhook registration), verifying and parsing inbound calls into ``inbound`` items, building outbound
calls and classifying the answers into ``sending`` outcomes. Every HTTP call goes through an injected
``engine.outbound.OutboundHttp``; API base URLs are parameters.
"""
from __future__ import annotations

from types import ModuleType

TYPES = ("telegram", "viber", "whatsapp")


def messenger(type_: str) -> ModuleType:
    """The protocol module of a messenger channel type; KeyError for any other type."""
    if type_ == "telegram":
        from engine.chat.messengers import telegram
        return telegram
    if type_ == "viber":
        from engine.chat.messengers import viber
        return viber
    if type_ == "whatsapp":
        from engine.chat.messengers import whatsapp
        return whatsapp
    raise KeyError(type_)
