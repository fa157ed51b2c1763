"""The registry holds Telegram, WhatsApp and Viber, each a complete ``Messenger`` whose operations take
what the protocol's callers pass."""
from __future__ import annotations

import inspect

import pytest

from engine.chat import channel_configs
from engine.chat.messengers.protocol import Messenger
from engine.chat.messengers.registry import MESSENGERS, registry
from engine.chat.messengers.telegram import Telegram
from engine.chat.messengers.viber import Viber
from engine.chat.messengers.whatsapp import WhatsApp

OPERATIONS = sorted(name for name, value in vars(Messenger).items()
                    if callable(value) and not name.startswith("_"))


def test_the_registry_holds_exactly_the_three_messengers_by_their_channel_type():
    assert list(MESSENGERS) == ["telegram", "whatsapp", "viber"]
    assert [type(m) for m in MESSENGERS.values()] == [Telegram, WhatsApp, Viber]
    for type_, messenger in MESSENGERS.items():
        assert messenger.type == messenger.settings_spec.channel_type == type_
    assert channel_configs.TYPES == ("webchat", "telegram", "whatsapp", "viber")
    with pytest.raises(TypeError):
        MESSENGERS["webchat"] = MESSENGERS["telegram"]            # built once, read only
    with pytest.raises(KeyError):
        MESSENGERS["webchat"]


@pytest.mark.parametrize("type_", list(MESSENGERS))
def test_each_messenger_implements_every_operation_of_the_protocol(type_):
    messenger = MESSENGERS[type_]
    assert isinstance(messenger, Messenger) and not type(messenger).__abstractmethods__
    assert set(Messenger.__abstractmethods__) <= set(OPERATIONS)
    for name in Messenger.__abstractmethods__:                   # its own, not the protocol's empty body
        assert getattr(type(messenger), name) is not getattr(Messenger, name), f"{type_} lacks {name}"
    for name in OPERATIONS:                                      # callers' arguments fit every one
        wanted = inspect.signature(getattr(Messenger, name)).parameters
        given = inspect.signature(getattr(type(messenger), name)).parameters
        assert [(p.name, p.kind) for p in given.values()] == [(p.name, p.kind) for p in wanted.values()], \
            f"{type_}.{name}{inspect.signature(getattr(type(messenger), name))}"
    assert isinstance(messenger.name, str) and messenger.name


def test_a_messenger_missing_an_operation_cannot_be_built():
    class Half(Messenger):
        type, name = "half", "Half"

        def parse(self, body):
            return []

    with pytest.raises(TypeError, match="abstract"):
        Half()


def test_a_registry_takes_one_messenger_per_type():
    with pytest.raises(ValueError, match="Two messengers for the channel type 'viber'"):
        registry(Viber(), Viber())
    assert list(registry(Viber(), Telegram())) == ["viber", "telegram"]
