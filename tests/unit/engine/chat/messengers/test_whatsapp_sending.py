"""Sending through the fake Cloud API: text, splitting, interactive buttons both ways, and every
Graph error code read into sent / wait / dead / retry."""
from __future__ import annotations

import pytest

from engine.chat.messengers import whatsapp
from engine.chat.messengers.sending import DEAD, RETRY, SENT, WAIT, Button, OutboundCall
from engine.errors import InvalidParamsError
from tests.fakes.server import Reply, encode


def send(http, fake, number, token, outbound: OutboundCall):
    request = whatsapp.request(fake.channel_settings(number, token), outbound, api_url=fake.api_url)
    return whatsapp.classify(http.request(request.method, request.url, headers=request.headers, body=request.body))


def send_all(http, fake, number, token, chat_id, text, buttons=()):
    return [send(http, fake, number, token, c) for c in whatsapp.calls(chat_id, text, buttons)]


def test_a_text_reply_and_a_long_one_split_in_order(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number()
    words = [f"w{n:05d}" for n in range(1500)]                                  # 10,499 characters
    outcomes = send_all(http, whatsapp_fake, number, token, "491", " ".join(words))
    assert [o.kind for o in outcomes] == [SENT] * 3
    assert [o.message_id for o in outcomes] == [s["wamid"] for s in whatsapp_fake.sent]
    assert " ".join(s["text"]["body"] for s in whatsapp_fake.sent).split() == words
    request = whatsapp_fake.requests_to("/messages")[0]
    assert request.header("Authorization") == f"Bearer {token}" and request.path == f"/v21.0/{number}/messages"
    assert request.json()["text"] == {"preview_url": False, "body": whatsapp_fake.sent[0]["text"]["body"]}


def test_buttons_are_interactive_reply_buttons_with_a_body_of_at_most_1024(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number()
    buttons = [Button("yes", "Yes"), Button("no", "No"), Button("later", "Ask me later")]
    outcomes = send_all(http, whatsapp_fake, number, token, "491", "x " * 1000, buttons)     # 1,999 characters
    assert [o.kind for o in outcomes] == [SENT, SENT]
    first, last = whatsapp_fake.sent
    assert first["type"] == "text" and last["type"] == "interactive"
    assert len(last["interactive"]["body"]["text"]) <= 1024
    assert [b["reply"] for b in last["interactive"]["action"]["buttons"]] == [
        {"id": "yes", "title": "Yes"}, {"id": "no", "title": "No"}, {"id": "later", "title": "Ask me later"}]
    [pressed] = whatsapp.parse(encode(whatsapp_fake.notification(number, messages=[
        whatsapp_fake.button_reply("491", last, "Ask me later")])))
    assert (pressed.message_type, pressed.text, pressed.button_id) == ("button", "Ask me later", "later")


def test_whatsapp_button_limits_are_refused_at_deploy_and_before_sending(http, whatsapp_fake):
    four = [Button(str(n), f"B{n}") for n in range(4)]
    assert whatsapp.button_refusals(four) == ["WhatsApp shows at most 3 reply buttons, not 4."]
    assert whatsapp.button_refusals([Button("a", "x" * 21)]) == [
        f"Button title '{'x' * 21}' is longer than WhatsApp's 20 characters."]
    assert whatsapp.button_refusals([Button("a" * 257, "A")]) == [
        f"Button id '{'a' * 40}' must be at most 256 characters without spaces around it for WhatsApp."]
    with pytest.raises(InvalidParamsError, match="cannot carry these buttons: WhatsApp shows at most 3"):
        whatsapp.calls("491", "hi", four)
    number, token = whatsapp_fake.add_number()
    too_many = whatsapp.calls("491", "hi", four[:3])[0]
    too_many.payload["interactive"]["action"]["buttons"].append({"type": "reply", "reply": {"id": "3", "title": "B3"}})
    assert send(http, whatsapp_fake, number, token, too_many).kind == DEAD          # the fake refuses it too


def test_outside_the_24_hour_window_a_reply_is_dead_at_once_with_metas_reason(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number()
    whatsapp_fake.close_window("491")
    [outcome] = send_all(http, whatsapp_fake, number, token, "491", "hi")
    assert outcome.kind == DEAD
    assert outcome.reason == ("(#131047) Re-engagement message: Message failed to send because more than 24 hours "
                              "have passed since the customer last replied to this number.")


def test_a_window_closed_reported_later_arrives_as_a_failed_status(http, whatsapp_fake):
    whatsapp_fake.window_mode = "status"
    number, token = whatsapp_fake.add_number()
    whatsapp_fake.close_window("491")
    [outcome] = send_all(http, whatsapp_fake, number, token, "491", "hi")
    assert outcome.kind == SENT
    [status] = whatsapp.parse(encode(whatsapp_fake.notification(number, statuses=whatsapp_fake.pending_statuses)))
    assert (status.status, status.error_code, status.message_id) == ("failed", 131047, outcome.message_id)


@pytest.mark.parametrize("code", [130429, 80007])
def test_rate_limits_wait_and_server_errors_retry(http, whatsapp_fake, code):
    number, token = whatsapp_fake.add_number()
    whatsapp_fake.rate_limit_next(code)
    limited = send_all(http, whatsapp_fake, number, token, "491", "hi")[0]
    assert (limited.kind, limited.wait_s) == (WAIT, whatsapp.RATE_LIMIT_WAIT_S)
    assert f"(#{code})" in limited.reason
    whatsapp_fake.fail_next(500)
    failed = send_all(http, whatsapp_fake, number, token, "491", "hi")[0]
    assert (failed.kind, failed.reason) == (RETRY, "Service temporarily unavailable (code 2)")
    whatsapp_fake.script(Reply(429, {"error": {"code": 130429, "message": "(#130429) Rate limit hit"}},
                               headers={"Retry-After": "7"}), path_endswith="/messages")
    assert send_all(http, whatsapp_fake, number, token, "491", "hi")[0].wait_s == 7.0


def test_an_expired_token_is_retried_not_dead(http, whatsapp_fake):
    number, _token = whatsapp_fake.add_number()
    [outcome] = send_all(http, whatsapp_fake, number, "EAAGexpired", "491", "hi")
    assert outcome.kind == RETRY
    assert outcome.reason == "Invalid OAuth access token - Cannot parse access token (code 190)"
