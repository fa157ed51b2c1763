"""Sending through the fake Bot API: plain text without parse_mode, splitting, inline keyboards, and
reading every answer Telegram gives into sent / wait / dead / retry."""
from __future__ import annotations

import pytest

from engine.chat.messengers import telegram
from engine.chat.messengers.sending import DEAD, RETRY, SENT, WAIT, Button, OutboundCall, transport_failure
from engine.errors import InvalidParamsError, OutboundError, OutboundRefusedError
from engine.outbound import OutboundHttp


def send(http, fake, token, outbound: OutboundCall):
    request = telegram.request({"bot_token": token}, outbound, api_url=fake.api_url)
    return telegram.classify(http.request(request.method, request.url, headers=request.headers, body=request.body))


def send_all(http, fake, token, chat_id, text, buttons=()):
    return [send(http, fake, token, call) for call in telegram.calls(chat_id, text, buttons)]


def test_a_reply_is_plain_text_never_markup(http, telegram_fake):
    token = telegram_fake.add_bot()
    text = "<b>*not bold*</b> _x_ [link](http://a)"
    [outcome] = send_all(http, telegram_fake, token, "42", text)
    assert outcome.kind == SENT and outcome.message_id == str(telegram_fake.sent[0]["message_id"])
    sent = telegram_fake.requests_to("/sendMessage")[0]
    assert sent.json() == {"chat_id": "42", "text": text}
    assert sent.header("Content-Type") == "application/json"
    assert sent.path == f"/bot{token}/sendMessage"


def test_a_long_reply_goes_out_as_several_messages_in_order_cut_at_whitespace(http, telegram_fake):
    token = telegram_fake.add_bot()
    words = [f"word{n:05d}" for n in range(1200)]          # 11,999 characters
    outcomes = send_all(http, telegram_fake, token, "42", " ".join(words))
    assert [o.kind for o in outcomes] == [SENT, SENT, SENT]
    texts = [s["text"] for s in telegram_fake.sent]
    assert all(len(t) <= 4096 for t in texts)
    assert " ".join(texts).split(" ") == words
    assert all(not t.startswith(" ") and not t.endswith(" ") for t in texts)


def test_buttons_go_with_the_last_part_as_an_inline_keyboard(http, telegram_fake):
    token = telegram_fake.add_bot()
    buttons = [Button("yes", "Yes please"), Button("no", "No thanks")]
    calls = telegram.calls("42", "x " * 3000, buttons)
    assert [("reply_markup" in c.payload) for c in calls] == [False, True]
    assert calls[-1].payload["reply_markup"] == {"inline_keyboard": [
        [{"text": "Yes please", "callback_data": "yes"}], [{"text": "No thanks", "callback_data": "no"}]]}
    assert [send(http, telegram_fake, token, c).kind for c in calls] == [SENT, SENT]


def test_a_stored_call_survives_json_and_uses_the_current_token(http, telegram_fake):
    old, new = telegram_fake.add_bot(), telegram_fake.add_bot()
    stored = telegram.calls("42", "hello", [Button("a", "A")])[0].to_json()
    assert old not in stored and new not in stored
    outcome = send(http, telegram_fake, new, OutboundCall.from_json(stored))
    assert outcome.kind == SENT and telegram_fake.sent[0]["token"] == new


def test_an_empty_reply_is_refused_before_sending():
    with pytest.raises(InvalidParamsError, match="needs a non-empty text"):
        telegram.calls("42", "  \n ")


def test_answering_a_pressed_button(http, telegram_fake):
    token = telegram_fake.add_bot()
    assert send(http, telegram_fake, token, telegram.answer_callback("4000123")).kind == SENT
    assert telegram_fake.requests_to("/answerCallbackQuery")[0].json() == {"callback_query_id": "4000123"}


def test_a_rate_limit_waits_as_long_as_telegram_asks(http, telegram_fake):
    token = telegram_fake.add_bot()
    telegram_fake.rate_limit_next(35)
    [outcome] = send_all(http, telegram_fake, token, "42", "hi")
    assert (outcome.kind, outcome.wait_s, outcome.reason) == (WAIT, 35.0, "Too Many Requests: retry after 35")


def test_a_blocked_bot_or_an_unknown_chat_is_dead_at_once_with_telegrams_reason(http, telegram_fake):
    token = telegram_fake.add_bot()
    telegram_fake.block(7)
    telegram_fake.forget_chat(8)
    [blocked] = send_all(http, telegram_fake, token, "7", "hi")
    [unknown] = send_all(http, telegram_fake, token, "8", "hi")
    assert (blocked.kind, blocked.reason) == (DEAD, "Forbidden: bot was blocked by the user")
    assert (unknown.kind, unknown.reason) == (DEAD, "Bad Request: chat not found")
    assert telegram_fake.sent == []


def test_server_errors_a_revoked_token_and_pages_that_are_not_the_bot_api_are_retried(http, telegram_fake):
    token = telegram_fake.add_bot()
    telegram_fake.fail_next(500)
    telegram_fake.fail_next(502)
    first, second = (send_all(http, telegram_fake, token, "42", "hi")[0] for _ in range(2))
    revoked = send_all(http, telegram_fake, "1:" + "x" * 30, "42", "hi")[0]
    assert (first.kind, first.reason) == (RETRY, "Internal Server Error")
    assert (second.kind, second.reason) == (RETRY, "Telegram answered HTTP 502 without a Bot API answer.")
    assert (revoked.kind, revoked.reason) == (RETRY, "Unauthorized")


def test_no_answer_is_retried_and_a_refused_url_is_dead(telegram_fake):
    token = telegram_fake.add_bot()
    telegram_fake.delay_next(1.0, path_endswith="/sendMessage")
    request = telegram.request({"bot_token": token}, telegram.calls("42", "hi")[0], api_url=telegram_fake.api_url)
    with OutboundHttp(allow_private=True, timeout_s=0.3) as impatient:
        with pytest.raises(OutboundError) as timed_out:
            impatient.request(request.method, request.url, headers=request.headers, body=request.body)
    assert transport_failure(timed_out.value).kind == RETRY
    with OutboundHttp(allow_private=False) as guarded:
        with pytest.raises(OutboundRefusedError) as refused:
            guarded.request(request.method, request.url, headers=request.headers, body=request.body)
    assert transport_failure(refused.value).kind == DEAD
    assert token not in timed_out.value.message and token not in refused.value.message


def test_button_ids_longer_than_telegrams_callback_data_are_refused_at_deploy(http, telegram_fake):
    fits, too_long = "é" * 32, "é" * 32 + "x"                    # 64 and 65 bytes
    assert telegram.button_refusals([Button(fits, "Fits")]) == []
    assert telegram.button_refusals([Button(too_long, "Long")]) == [
        f"Button id '{too_long}' is longer than Telegram's 64 bytes of callback data."]
    with pytest.raises(InvalidParamsError, match="Telegram cannot carry these buttons: Button id"):
        telegram.calls("1", "x", [Button(too_long, "Long")])
    token = telegram_fake.add_bot()
    assert send_all(http, telegram_fake, token, "1", "x", [Button(fits, "Fits")])[0].kind == SENT
    forced = telegram.calls("1", "x", [Button("a", "Long")])[0]
    forced.payload["reply_markup"]["inline_keyboard"][0][0]["callback_data"] = too_long
    assert send(http, telegram_fake, token, forced).kind == DEAD            # the fake refuses it as Telegram does


def test_common_button_rules_apply_to_telegram_too():
    assert telegram.button_refusals([Button("a", "Same"), Button("a", "Same"), Button(" ", "")]) == [
        "Button id 'a' is used twice.", "Button title 'Same' is used twice.",
        "Button 3 has no id.", "Button 3 has no title."]
