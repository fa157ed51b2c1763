"""Connecting a Telegram bot against the fake Bot API: getMe, setWebhook, deleteWebhook, and every refusal."""
from __future__ import annotations

import hmac
import re

import pytest

from engine.chat.messengers import telegram
from engine.errors import InvalidParamsError, MessengerUnavailableError
from engine.outbound import OutboundHttp

HOOK = "https://baton.example/webhooks/telegram"


def test_connect_checks_the_token_then_registers_the_webhook_with_a_secret_token(http, telegram_fake):
    token = telegram_fake.add_bot("Acme Support", "acme_support_bot")
    connection = telegram.connect(http, {"bot_token": token}, HOOK, api_url=telegram_fake.api_url)

    paths = [r.path.rsplit("/", 1)[-1] for r in telegram_fake.requests]
    assert paths == ["getMe", "setWebhook"]
    registered = telegram_fake.webhooks[token]
    assert registered["url"] == HOOK
    assert registered["secret_token"] == connection.webhook_secret
    assert re.fullmatch(r"[0-9a-f]{16}_[A-Za-z0-9_-]{43}", connection.webhook_secret)
    assert registered["allowed_updates"] == ["message", "edited_message", "callback_query", "my_chat_member"]
    assert connection.bot_name == "Acme Support"
    assert connection.bot_id == token.split(":")[0]
    assert connection.shown() == {"bot_id": connection.bot_id, "bot_name": "Acme Support",
                                  "webhook_url": HOOK, "bot_username": "acme_support_bot"}
    assert connection.webhook_secret not in repr(connection)


def test_every_connect_makes_a_new_secret_token_unless_one_is_kept(http, telegram_fake):
    token = telegram_fake.add_bot()
    first = telegram.connect(http, {"bot_token": token}, HOOK, api_url=telegram_fake.api_url)
    second = telegram.connect(http, {"bot_token": token}, HOOK, api_url=telegram_fake.api_url)
    kept = telegram.connect(http, {"bot_token": token}, HOOK, api_url=telegram_fake.api_url,
                            secret_token=first.webhook_secret)
    assert first.webhook_secret != second.webhook_secret
    assert kept.webhook_secret == first.webhook_secret == telegram_fake.webhooks[token]["secret_token"]


def test_a_token_telegram_does_not_know_is_refused_quoting_telegram(http, telegram_fake):
    unknown = "123456789:" + "A" * 35
    with pytest.raises(InvalidParamsError) as refused:
        telegram.connect(http, {"bot_token": unknown}, HOOK, api_url=telegram_fake.api_url)
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
            telegram.connect(http, settings, HOOK, api_url=telegram_fake.api_url)
        assert refused.value.data["param"] == param
        assert words in refused.value.message
    assert telegram_fake.requests == []


def test_a_webhook_telegram_refuses_names_the_url_and_quotes_telegram(http, telegram_fake):
    telegram_fake.require_https = True
    token = telegram_fake.add_bot()
    with pytest.raises(InvalidParamsError) as refused:
        telegram.connect(http, {"bot_token": token}, "http://baton.example/webhooks/telegram",
                         api_url=telegram_fake.api_url)
    assert refused.value.data["param"] == "webhook_url"
    assert refused.value.message == ("Telegram refused the webhook URL http://baton.example/webhooks/telegram: "
                                     "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
    assert token not in telegram_fake.webhooks


def test_an_unreachable_telegram_is_a_clear_error(http, telegram_fake):
    token = telegram_fake.add_bot()
    gone = telegram_fake.api_url
    telegram_fake.stop()
    with pytest.raises(MessengerUnavailableError) as failed:
        telegram.connect(http, {"bot_token": token}, HOOK, api_url=gone)
    assert failed.value.message == ("Telegram could not be reached (connection refused); nothing was "
                                    "changed, try again later.")
    assert failed.value.http_status == 502 and failed.value.reason == "messenger_unavailable"
    assert token not in failed.value.message


def test_a_bad_gateway_page_or_a_rate_limit_while_connecting_is_unavailable(http, telegram_fake):
    token = telegram_fake.add_bot()
    telegram_fake.fail_next(502, method="getMe")
    with pytest.raises(MessengerUnavailableError, match="answered HTTP 502"):
        telegram.connect(http, {"bot_token": token}, HOOK, api_url=telegram_fake.api_url)
    telegram_fake.rate_limit_next(17, method="setWebhook")
    with pytest.raises(MessengerUnavailableError, match="asks to wait 17 seconds"):
        telegram.connect(http, {"bot_token": token}, HOOK, api_url=telegram_fake.api_url)


def test_a_slow_telegram_times_out_as_unavailable(telegram_fake):
    token = telegram_fake.add_bot()
    telegram_fake.delay_next(1.0, path_endswith="/getMe")
    with OutboundHttp(allow_private=True, timeout_s=0.3) as impatient:
        with pytest.raises(MessengerUnavailableError, match=r"\(timed out\)"):
            telegram.connect(impatient, {"bot_token": token}, HOOK, api_url=telegram_fake.api_url)


def test_the_ssrf_guard_still_applies_to_the_api_url(telegram_fake):
    token = telegram_fake.add_bot()
    with OutboundHttp(allow_private=False) as guarded:
        with pytest.raises(MessengerUnavailableError, match="Telegram cannot be called: .*loopback"):
            telegram.connect(guarded, {"bot_token": token}, HOOK, api_url=telegram_fake.api_url)


def test_disconnect_deletes_the_webhook_and_webhook_info_reads_it(http, telegram_fake):
    token = telegram_fake.add_bot()
    telegram.connect(http, {"bot_token": token}, HOOK, api_url=telegram_fake.api_url)
    assert telegram.webhook_info(http, {"bot_token": token}, api_url=telegram_fake.api_url)["url"] == HOOK
    telegram.disconnect(http, {"bot_token": token}, api_url=telegram_fake.api_url)
    assert token not in telegram_fake.webhooks
    assert telegram.webhook_info(http, {"bot_token": token}, api_url=telegram_fake.api_url)["url"] == ""


# --- verifying inbound calls ----------------------------------------------------------------------------

def test_an_update_sent_by_telegram_verifies_with_the_stored_secret_token(http, telegram_fake, baton):
    token = telegram_fake.add_bot()
    connection = telegram.connect(http, {"bot_token": token}, baton.url + telegram.WEBHOOK_PATH,
                                  api_url=telegram_fake.api_url)
    assert telegram_fake.deliver(token, telegram_fake.text_update(42, "hi")).status_code == 200
    received = baton.wait_for("", 1)[0]
    assert received.path == "/webhooks/telegram"
    assert telegram.secret_token_key(received.headers) == connection.webhook_secret.split("_")[0]
    assert telegram.verify(received.headers, connection.webhook_secret)
    assert telegram.parse(received.body)[0].text == "hi"


def test_wrong_missing_or_odd_secret_tokens_do_not_verify():
    secret = telegram.new_secret_token()
    header = telegram.SECRET_HEADER
    assert telegram.verify({header.lower(): secret}, secret)
    assert not telegram.verify({header: secret[:-1] + ("A" if secret[-1] != "A" else "B")}, secret)
    assert not telegram.verify({}, secret)
    assert not telegram.verify({header: ""}, secret)
    assert not telegram.verify({header: "é" + secret}, secret)
    assert not telegram.verify({header: secret}, "")
    assert telegram.secret_token_key({}) is None
    assert telegram.secret_token_key({header: "not-ours"}) is None
    assert telegram.secret_token_key({header: "0123456789abcdef_"}) is None


def test_verification_compares_in_constant_time(monkeypatch):
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    secret = telegram.new_secret_token()
    assert telegram.verify({telegram.SECRET_HEADER: secret}, secret)
    assert not telegram.verify({telegram.SECRET_HEADER: "x" + secret}, secret)
    assert compared == [(secret.encode(), secret.encode()), (("x" + secret).encode(), secret.encode())]
