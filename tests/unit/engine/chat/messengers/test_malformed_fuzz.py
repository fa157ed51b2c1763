"""No body can make a parser raise anything but BadRequestError: every field of real payloads is
replaced, one at a time, by values of every other JSON type."""
from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from engine.chat.messengers.items import InboundEvent, InboundMessage
from engine.chat.messengers.registry import MESSENGERS
from engine.errors import BadRequestError
from tests.fakes.server import encode
from tests.fakes.telegram import FakeTelegram
from tests.fakes.viber import FakeViber
from tests.fakes.whatsapp import FakeWhatsApp

telegram, viber, whatsapp = MESSENGERS["telegram"], MESSENGERS["viber"], MESSENGERS["whatsapp"]
ODD_VALUES = [None, True, 0, -1, 2**70, 1.5, "", "x", " padded ", [], [None], {}, {"": None}]


def paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from paths(child, prefix + (index,))


def replaced(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copied = copy.deepcopy(value)
    holder = copied
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = new
    return copied


def samples() -> list[tuple[str, Any, dict]]:
    tg, vb, wa = FakeTelegram(), FakeViber(), FakeWhatsApp()
    wa.numbers["1"] = {"display_phone_number": "1"}
    keyboard = [{"text": "Yes", "callback_data": "y"}]
    sent = {"keyboard": {"Buttons": [{"ActionBody": "Yes"}]}, "tracking_data": '{"baton_buttons":{"Yes":"y"}}'}
    return [
        ("telegram text", telegram, tg.text_update(1, "hi")),
        ("telegram photo", telegram, tg.update(message=tg.message(1, photo=[{"file_id": "a", "width": 1,
                                                                              "height": 1}], caption="c"))),
        ("telegram venue", telegram, tg.update(message=tg.message(1, venue={"location": {"latitude": 1},
                                                                            "title": "t"}))),
        ("telegram button", telegram, tg.button_update(1, "y", keyboard)),
        ("telegram blocked", telegram, tg.blocked_update(1)),
        ("viber text", viber, vb.message_event("u", "hi")),
        ("viber button", viber, vb.pressed("u", sent, "Yes")),
        ("viber picture", viber, vb.message_event("u", type="picture", media="m", size=1, file_name="f")),
        ("viber location", viber, vb.message_event("u", type="location", location={"lat": 1, "lon": 2})),
        ("viber contact", viber, vb.message_event("u", type="contact", contact={"name": "n", "phone_number": "1"})),
        ("viber failed", viber, vb.event("failed", user_id="u", desc="d")),
        ("viber subscribed", viber, vb.event("subscribed", user={"id": "u"})),
        ("whatsapp messages", whatsapp, wa.notification("1", messages=[
            wa.text_message("4", "hi"), wa.message("4", "image", image={"id": "m", "caption": "c"}),
            wa.message("4", "interactive", interactive={"type": "button_reply", "button_reply": {"id": "y",
                                                                                                  "title": "Y"}}),
            wa.message("4", "contacts", contacts=[{"name": {"formatted_name": "B"}, "phones": [{"phone": "1"}]}]),
            wa.message("4", "location", location={"latitude": 1, "longitude": 2})])),
        ("whatsapp statuses", whatsapp, wa.notification("1", statuses=[
            wa.status("w", "failed", "4", errors=[{"code": 1, "title": "t", "error_data": {"details": "d"}}])])),
    ]


@pytest.mark.parametrize("name, messenger, payload", samples(), ids=[s[0] for s in samples()])
def test_any_field_of_any_type_is_parsed_or_refused_as_a_bad_request(name, messenger, payload):
    tried = 0
    for path in paths(payload):
        for odd in ODD_VALUES:
            try:
                items = messenger.parse(encode(replaced(payload, path, odd)))
            except BadRequestError:
                continue
            finally:
                tried += 1
            assert all(isinstance(item, (InboundMessage, InboundEvent)) for item in items)
            for item in items:
                if isinstance(item, InboundMessage):
                    assert isinstance(item.text, str) and item.chat_id and item.dedup_id
                    encode(item.variables())              # the variables are always plain JSON
    assert tried > 50
