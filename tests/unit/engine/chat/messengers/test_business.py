"""What issue 28 added to the messengers' wire protocols, without a server: why a dead reply is dead
(``failure``), WhatsApp's templates and read receipts, its pair rate, Viber's rate control, and the
checks of a template and of the ``mark_read`` setting."""
from __future__ import annotations

import json

import pytest

from bpmn.profile import read_message_template, template_problem
from engine.chat.messenger_deliveries import checked_template
from engine.chat.messengers.items import InboundMessage
from engine.chat.messengers.registry import MESSENGERS
from engine.chat.messengers.sending import DEAD, SENT, WAIT
from engine.errors import InvalidParamsError
from engine.outbound.http import OutboundResponse

TELEGRAM, VIBER, WHATSAPP = MESSENGERS["telegram"], MESSENGERS["viber"], MESSENGERS["whatsapp"]


def answer(status: int, body: dict) -> OutboundResponse:
    return OutboundResponse(status, {}, json.dumps(body).encode(), 0.01)


@pytest.mark.parametrize("code, description, failure", [
    (403, "Forbidden: bot was blocked by the user", "blocked"),
    (403, "Forbidden: user is deactivated", "unreachable"),
    (403, "Forbidden: bot was kicked from the group chat", "unreachable"),
    (400, "Bad Request: chat not found", "unreachable"),
    (400, "Bad Request: message is too long", "too_long"),
    (400, "Bad Request: BUTTON_DATA_INVALID", "other")])
def test_telegram_says_why_a_reply_is_dead(code, description, failure):
    outcome = TELEGRAM.classify(answer(code, {"ok": False, "error_code": code, "description": description}))
    assert (outcome.kind, outcome.failure) == (DEAD, failure)


@pytest.mark.parametrize("status, failure", [(6, "unsubscribed"), (5, "unreachable"), (11, "unreachable"),
                                             (3, "other")])
def test_viber_says_why_a_reply_is_dead(status, failure):
    outcome = VIBER.classify(answer(200, {"status": status, "status_message": "no"}))
    assert (outcome.kind, outcome.failure) == (DEAD, failure)


def test_vibers_status_12_is_a_wait_for_the_whole_account():
    outcome = VIBER.classify(answer(200, {"status": 12, "status_message": "tooManyRequests"}))
    assert (outcome.kind, outcome.whole_bot) == (WAIT, True) and outcome.wait_s > 0


@pytest.mark.parametrize("code, kind, whole_bot, failure", [
    (131047, DEAD, True, "window_closed"), (131026, DEAD, True, "unreachable"), (132001, DEAD, True, "other"),
    (131056, WAIT, False, None), (130429, WAIT, True, None)])
def test_whatsapp_codes(code, kind, whole_bot, failure):
    outcome = WHATSAPP.classify(answer(400, {"error": {"message": f"(#{code}) x", "code": code}}))
    assert (outcome.kind, outcome.whole_bot, outcome.failure) == (kind, whole_bot, failure)
    assert WHATSAPP.failure_of(code) == (failure or "other")


def test_a_read_receipt_is_sent_and_only_with_mark_read():
    message = InboundMessage(channel="whatsapp", dedup_id="wamid.ABC", chat_id="491", user_id="491", display_name="Ann", text="hi")
    assert WHATSAPP.read_receipt(message, {"mark_read": False}) is None
    assert WHATSAPP.read_receipt(message, {}) is None
    call = WHATSAPP.read_receipt(message, {"mark_read": True})
    assert call.payload == {"messaging_product": "whatsapp", "status": "read", "message_id": "wamid.ABC"}
    assert WHATSAPP.classify(answer(200, {"success": True})).kind == SENT
    assert TELEGRAM.read_receipt(message, {"mark_read": True}) is None


def test_the_template_call_carries_the_body_parameters_in_order():
    call = WHATSAPP.template_call("491", {"name": "order_shipped", "language": "de", "params": ["Ann", "A-17"]})
    assert call.payload["type"] == "template" and call.payload["to"] == "491"
    assert call.payload["template"] == {"name": "order_shipped", "language": {"code": "de"}, "components": [
        {"type": "body", "parameters": [{"type": "text", "text": "Ann"}, {"type": "text", "text": "A-17"}]}]}
    bare = WHATSAPP.template_call("491", {"name": "hello_world", "language": "en_US", "params": []})
    assert "components" not in bare.payload["template"]
    assert TELEGRAM.template_call("1", {"name": "x", "language": "en", "params": []}) is None
    assert (WHATSAPP.window_s, TELEGRAM.window_s) == (24 * 3600, None)


@pytest.mark.parametrize("template, param", [
    ({"name": "x", "params": [1]}, "template.params"), ({"name": "Has Space"}, "template.name"),
    ({"name": "x", "language": "english"}, "template.language"), ({"name": "x", "extra": 1}, "template.extra"),
    ({"name": "x", "params": [" "]}, "template.params"), ({"name": "x", "params": ["a"] * 51}, "template.params"),
    ("x", "template")])
def test_checked_template_names_what_is_wrong(template, param):
    with pytest.raises(InvalidParamsError) as refused:
        checked_template(template)
    assert refused.value.data["param"] == param


def test_checked_template_fills_the_defaults():
    assert checked_template({"name": "hello_world"}) == {"name": "hello_world", "language": "en_US", "params": []}


def test_the_step_properties_are_read_as_a_template():
    assert read_message_template({"text": "x"}) is None
    assert read_message_template({"template": " order_shipped ", "template_params": '["{{ a }}"]'}) == {
        "name": "order_shipped", "language": "en_US", "params": ["{{ a }}"]}
    assert read_message_template({"template": "t", "template_params": "not json"})["params"] == "not json"
    assert template_problem("t", "en", ["a", 2])[0] == "template_params"


def test_mark_read_is_an_optional_flag():
    spec = WHATSAPP.settings_spec
    base = {"phone_number_id": "1", "access_token": "t", "app_secret": "s", "verify_token": "v"}
    assert "mark_read" not in spec.check(base)
    assert spec.check({**base, "mark_read": True})["mark_read"] is True
    with pytest.raises(InvalidParamsError) as refused:
        spec.check({**base, "mark_read": "yes"})
    assert refused.value.data["param"] == "settings.mark_read"
    assert spec.shown({**base, "mark_read": True}) == {"phone_number_id": "1", "mark_read": True}
