"""The messengers Baton talks to, by channel type: built once here (they hold no configuration; the
API base URLs ``create_app`` reads are passed with each call), or by a test with its own."""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from engine.chat.messengers.protocol import Messenger
from engine.chat.messengers.telegram import Telegram
from engine.chat.messengers.viber import Viber
from engine.chat.messengers.whatsapp import WhatsApp

Registry = Mapping[str, Messenger]


def registry(*messengers: Messenger) -> Registry:
    """A read-only map of channel type to messenger, one messenger per type."""
    by_type: dict[str, Messenger] = {}
    for messenger in messengers:
        if messenger.type in by_type:
            raise ValueError(f"Two messengers for the channel type '{messenger.type}'.")
        by_type[messenger.type] = messenger
    return MappingProxyType(by_type)


# In the order the channel types are listed to callers (after webchat).
MESSENGERS = registry(Telegram(), WhatsApp(), Viber())
