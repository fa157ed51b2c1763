"""Telegram's Bot API against the fake: connecting (getMe, setWebhook, deleteWebhook, every refusal),
verifying updates, and sending (plain text without parse_mode, splitting, inline keyboards, every
answer Telegram gives read into sent / wait / dead / retry)."""
from __future__ import annotations

import hmac
import re

import pytest

from engine.chat.messengers.protocol import InboundCall
from engine.chat.messengers.sending import DEAD, RETRY, SENT, WAIT, Button, OutboundCall, transport_failure
from engine.chat.messengers.telegram.bot_api import (SECRET_HEADER, WEBHOOK_PATH, Telegram, answer_callback,
                                                     new_secret_token, secret_token_key)
from engine.errors import InvalidParamsError, MessengerUnavailableError, OutboundError, OutboundRefusedError
from engine.outbound import OutboundHttp

PUBLIC = "https://baton.example"
telegram = Telegram()


def webhook_of(connection) -> str:
    return f"{PUBLIC}/webhooks/telegram?channel={connection.inbound_key}"


def test_connect_checks_the_token_then_registers_the_webhook_with_a_secret_token(http, telegram_fake):
    token = telegram_fake.add_bot("Acme Support", "acme_support_bot")
    connection = telegram.connect(http, {"bot_token": token}, PUBLIC, api_url=telegram_fake.api_url)

    paths = [r.path.rsplit("/", 1)[-1] for r in telegram_fake.requests]
    assert paths == ["getMe", "setWebhook"]
    registered = telegram_fake.webhooks[token]
    assert registered["url"] == connection.webhook_url == webhook_of(connection)
    assert connection.inbound_key == connection.webhook_secret.split("_")[0]
    assert registered["secret_token"] == connection.webhook_secret
    assert re.fullmatch(r"[0-9a-f]{16}_[A-Za-z0-9_-]{43}", connection.webhook_secret)
    assert registered["allowed_updates"] == ["message", "edited_message", "callback_query", "my_chat_member"]
    assert connection.bot_name == "Acme Support"
    assert connection.bot_id == token.split(":")[0]
    assert connection.shown() == {"bot_id": connection.bot_id, "bot_name": "Acme Support",
                                  "webhook_url": webhook_of(connection), "bot_username": "acme_support_bot"}
    assert connection.webhook_secret not in repr(connection)


def test_every_connect_makes_a_new_secret_token_and_a_url_naming_its_key(http, telegram_fake):
    token = telegram_fake.add_bot()
    first = telegram.connect(http, {"bot_token": token}, PUBLIC, api_url=telegram_fake.api_url)
    second = telegram.connect(http, {"bot_token": token}, PUBLIC, api_url=telegram_fake.api_url)
    assert first.webhook_secret != second.webhook_secret and first.inbound_key != second.inbound_key
    assert second.webhook_secret == telegram_fake.webhooks[token]["secret_token"]
    assert telegram_fake.webhooks[token]["url"] == webhook_of(second)


def test_a_token_telegram_does_not_know_is_refused_quoting_telegram(http, telegram_fake):
    unknown = "123456789:" + "A" * 35
    with pytest.raises(InvalidParamsError) as refused:
        telegram.connect(http, {"bot_token": unknown}, PUBLIC, api_url=telegram_fake.api_url)
    assert refused.value.data == {"param": "settings.bot_token", "messenger_error": "Unauthorized"}
    assert refused.value.message == "Telegram refused the bot_token: Unauthorized"
    assert [r.path.rsplit("/", 1)[-1] for r in telegram_fake.requests] == ["getMe"]


def test_settings_are_checked_before_anything_is_sent(http, telegram_fake):
    cases = [({"bot_token": "not a token"}, "settings.bot_token", "does not look like a bot token"),
             ({"bot_token": "1:abc/../x?y#"}, "settings.bot_token", "does not look like"),
             ({}, "settings.bot_token", "Missing setting(s) 'bot_token'"),
             ({"bot_token": "1:" + "a" * 30, "chat": "x"}, "settings", "Unknown setting(s) 'chat'"),
             ({"bot_token": 12}, "settings.bot_token", "must be a string"),
             ("token", "settings", "must be an object")]
    for settings, param, words in cases:
        with pytest.raises(InvalidParamsError) as refused:
            telegram.connect(http, settings, PUBLIC, api_url=telegram_fake.api_url)
        assert refused.value.data["param"] == param
        assert words in refused.value.message
    assert telegram_fake.requests == []


def test_a_webhook_telegram_refuses_names_the_url_and_quotes_telegram(http, telegram_fake):
    telegram_fake.require_https = True
    token = telegram_fake.add_bot()
    with pytest.raises(InvalidParamsError) as refused:
        telegram.connect(http, {"bot_token": token}, "http://baton.example", api_url=telegram_fake.api_url)
    assert refused.value.data["param"] == "webhook_url"
    assert re.fullmatch(r"Telegram refused the webhook URL http://baton\.example/webhooks/telegram\?channel="
                        r"[0-9a-f]{16}: Bad Request: bad webhook: An HTTPS URL must be provided for webhook",
                        refused.value.message)
    assert token not in telegram_fake.webhooks


def test_an_unreachable_telegram_is_a_clear_error(http, telegram_fake):
    token = telegram_fake.add_bot()
    gone = telegram_fake.api_url
    telegram_fake.stop()
    with pytest.raises(MessengerUnavailableError) as failed:
        telegram.connect(http, {"bot_token": token}, PUBLIC, api_url=gone)
    assert failed.value.message == ("Telegram could not be reached (connection refused); nothing was "
                                    "changed, try again later.")
    assert failed.value.http_status == 502 and failed.value.reason == "messenger_unavailable"
    assert token not in failed.value.message


def test_a_bad_gateway_page_or_a_rate_limit_while_connecting_is_unavailable(http, telegram_fake):
    token = telegram_fake.add_bot()
    telegram_fake.fail_next(502, method="getMe")
    with pytest.raises(MessengerUnavailableError, match="answered HTTP 502"):
        telegram.connect(http, {"bot_token": token}, PUBLIC, api_url=telegram_fake.api_url)
    telegram_fake.rate_limit_next(17, method="setWebhook")
    with pytest.raises(MessengerUnavailableError, match="asks to wait 17 seconds"):
        telegram.connect(http, {"bot_token": token}, PUBLIC, api_url=telegram_fake.api_url)


def test_a_slow_telegram_times_out_as_unavailable(telegram_fake):
    token = telegram_fake.add_bot()
    telegram_fake.delay_next(1.0, path_endswith="/getMe")
    with OutboundHttp(allow_private=True, timeout_s=0.3) as impatient:
        with pytest.raises(MessengerUnavailableError, match=r"\(timed out\)"):
            telegram.connect(impatient, {"bot_token": token}, PUBLIC, api_url=telegram_fake.api_url)


def test_the_ssrf_guard_still_applies_to_the_api_url(telegram_fake):
    token = telegram_fake.add_bot()
    with OutboundHttp(allow_private=False) as guarded:
        with pytest.raises(MessengerUnavailableError, match="Telegram cannot be called: .*loopback"):
            telegram.connect(guarded, {"bot_token": token}, PUBLIC, api_url=telegram_fake.api_url)


def test_disconnect_deletes_the_webhook_and_webhook_info_reads_it(http, telegram_fake):
    token = telegram_fake.add_bot()
    connection = telegram.connect(http, {"bot_token": token}, PUBLIC, api_url=telegram_fake.api_url)
    assert telegram.webhook_info(http, {"bot_token": token}, api_url=telegram_fake.api_url)["url"] == \
        connection.webhook_url
    assert telegram.registered_webhook(http, {"bot_token": token}, api_url=telegram_fake.api_url) == \
        connection.webhook_url
    telegram.disconnect(http, {"bot_token": token}, api_url=telegram_fake.api_url)
    assert token not in telegram_fake.webhooks
    assert telegram.webhook_info(http, {"bot_token": token}, api_url=telegram_fake.api_url)["url"] == ""


# --- verifying inbound calls ----------------------------------------------------------------------------

def test_an_update_sent_by_telegram_verifies_with_the_stored_secret_token(http, telegram_fake, baton):
    token = telegram_fake.add_bot()
    connection = telegram.connect(http, {"bot_token": token}, baton.url, api_url=telegram_fake.api_url)
    assert telegram_fake.deliver(token, telegram_fake.text_update(42, "hi")).status_code == 200
    received = baton.wait_for("", 1)[0]
    assert (received.path, received.query) == (WEBHOOK_PATH, {"channel": connection.inbound_key})
    call = InboundCall.of(received.body, received.headers, received.query)
    assert secret_token_key(received.headers) == connection.inbound_key
    assert telegram.addressed(call).keys == (connection.inbound_key,)
    assert telegram.verifying_secret({"bot_token": token}, connection.webhook_secret) == connection.webhook_secret
    assert telegram.verify(call, connection.webhook_secret)
    assert telegram.parse(received.body)[0].text == "hi"


def carrying(headers: dict) -> InboundCall:
    return InboundCall.of(b"{}", headers)


def test_wrong_missing_or_odd_secret_tokens_do_not_verify():
    secret = new_secret_token()
    header = SECRET_HEADER
    assert telegram.verify(carrying({header.lower(): secret}), secret)
    assert not telegram.verify(carrying({header: secret[:-1] + ("A" if secret[-1] != "A" else "B")}), secret)
    assert not telegram.verify(carrying({}), secret)
    assert not telegram.verify(carrying({header: ""}), secret)
    assert not telegram.verify(carrying({header: "é" + secret}), secret)
    assert not telegram.verify(carrying({header: secret}), "")
    assert secret_token_key({}) is None
    assert secret_token_key({header: "not-ours"}) is None
    assert secret_token_key({header: "0123456789abcdef_"}) is None
    assert telegram.addressed(carrying({header: "not-ours"})).keys == ()


def test_verification_compares_in_constant_time(monkeypatch):
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    secret = new_secret_token()
    assert telegram.verify(carrying({SECRET_HEADER: secret}), secret)
    assert not telegram.verify(carrying({SECRET_HEADER: "x" + secret}), secret)
    assert compared == [(secret.encode(), secret.encode()), (("x" + secret).encode(), secret.encode())]


# --- sending ------------------------------------------------------------------------------------------

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
    assert send(http, telegram_fake, token, answer_callback("4000123")).kind == SENT
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
