"""WhatsApp against the fake Cloud API: checking the number, Meta's handshake and signatures."""
from __future__ import annotations

import hmac

import pytest

from engine.chat.messengers import whatsapp
from engine.errors import InvalidParamsError, MessengerUnavailableError
from tests.fakes.server import Recorded, Recorder, Reply


def settings(number: str, token: str) -> dict:
    return {"phone_number_id": number, "access_token": token, "app_secret": "s" * 32, "verify_token": "v" * 16}


def test_connect_reads_the_number_with_the_bearer_token_and_registers_nothing(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number("Acme Support")
    connection = whatsapp.connect(http, settings(number, token), "https://b.example/webhooks/whatsapp",
                                  api_url=whatsapp_fake.api_url)
    [check] = whatsapp_fake.requests
    assert (check.method, check.path, check.header("Authorization")) == ("GET", f"/v21.0/{number}", f"Bearer {token}")
    assert check.query == {"fields": "id,display_phone_number,verified_name"}
    assert (connection.bot_id, connection.bot_name) == (number, "Acme Support")
    assert connection.webhook_url == "https://b.example/webhooks/whatsapp"
    assert connection.details == {"display_phone_number": whatsapp_fake.numbers[number]["display_phone_number"]}
    whatsapp.disconnect(http, settings(number, token), api_url=whatsapp_fake.api_url)
    assert len(whatsapp_fake.requests) == 1


def test_a_bad_token_or_an_unknown_number_is_refused_quoting_meta(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number()
    with pytest.raises(InvalidParamsError) as bad_token:
        whatsapp.connect(http, settings(number, "EAAGwrong"), api_url=whatsapp_fake.api_url)
    with pytest.raises(InvalidParamsError) as unknown:
        whatsapp.connect(http, settings("999", token), api_url=whatsapp_fake.api_url)
    assert bad_token.value.data["param"] == "settings.access_token"
    assert bad_token.value.message == ("WhatsApp refused the access_token: Invalid OAuth access token - "
                                       "Cannot parse access token (code 190)")
    assert unknown.value.data["param"] == "settings.phone_number_id"
    assert unknown.value.message.startswith("WhatsApp refused the phone_number_id 999: Unsupported get request. "
                                            "Object with ID '999' does not exist")


def test_whatsapp_settings_are_exactly_the_four_keys(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number()
    for given, param in [({**settings(number, token), "waba_id": "1"}, "settings"),
                         ({"phone_number_id": number, "access_token": token}, "settings.app_secret"),
                         (settings("12ab", token), "settings.phone_number_id"),
                         (settings(number, "tok en"), "settings.access_token")]:
        with pytest.raises(InvalidParamsError) as refused:
            whatsapp.connect(http, given, api_url=whatsapp_fake.api_url)
        assert refused.value.data["param"] == param
    assert whatsapp.SETTINGS.shown(settings(number, token)) == {"phone_number_id": number}
    assert whatsapp_fake.requests == []


def test_meta_out_of_order_is_unavailable(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number()
    whatsapp_fake.fail_next(503)
    with pytest.raises(MessengerUnavailableError, match=r"cannot check the number now \(Service temporarily"):
        whatsapp.connect(http, settings(number, token), api_url=whatsapp_fake.api_url)
    whatsapp_fake.script(Reply(502, b"<html>bad gateway</html>"))
    with pytest.raises(MessengerUnavailableError, match="answered HTTP 502"):
        whatsapp.connect(http, settings(number, token), api_url=whatsapp_fake.api_url)


# --- the handshake and signatures ----------------------------------------------------------------------

class HandshakeAnswerer(Recorder):
    """Answers Meta's GET the way Baton's endpoint will, with ``whatsapp.handshake``."""

    def __init__(self, verify_tokens):
        super().__init__()
        self.verify_tokens = verify_tokens

    def respond(self, request: Recorded) -> Reply:
        challenge = whatsapp.handshake(request.query, self.verify_tokens)
        return Reply(200, challenge.encode()) if challenge is not None else Reply(403, b"")


def test_the_handshake_echoes_the_challenge_only_for_a_known_verify_token(whatsapp_fake):
    with HandshakeAnswerer(["other-channel", "my-verify-token"]) as baton:
        assert whatsapp_fake.configure_webhook(baton.url + whatsapp.WEBHOOK_PATH, "my-verify-token")
        assert not whatsapp_fake.configure_webhook(baton.url + whatsapp.WEBHOOK_PATH, "guessed")
        assert baton.requests[0].query["hub.mode"] == "subscribe"
    good = {"hub.mode": "subscribe", "hub.verify_token": "t", "hub.challenge": "1158201444"}
    assert whatsapp.handshake(good, ["t"]) == "1158201444"
    assert whatsapp.handshake({**good, "hub.mode": "unsubscribe"}, ["t"]) is None
    assert whatsapp.handshake({**good, "hub.challenge": ""}, ["t"]) is None
    assert whatsapp.handshake({**good, "hub.challenge": "<script>\n"}, ["t"]) is None
    assert whatsapp.handshake({"hub.mode": "subscribe"}, ["t"]) is None
    assert whatsapp.handshake(good, []) is None


def test_the_handshake_compares_every_verify_token_in_constant_time(monkeypatch):
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append(b) or real(a, b))
    query = {"hub.mode": "subscribe", "hub.verify_token": "a", "hub.challenge": "1"}
    assert whatsapp.handshake(query, ["a", "b", "c"]) == "1"
    assert compared == [b"a", b"b", b"c"]          # no early exit on the first match


def test_notifications_verify_with_the_app_secret_over_the_exact_body(whatsapp_fake, baton, monkeypatch):
    number, _ = whatsapp_fake.add_number()
    whatsapp_fake.deliver(whatsapp_fake.notification(number, messages=[whatsapp_fake.text_message("491", "hi")]),
                          url=baton.url + whatsapp.WEBHOOK_PATH)
    whatsapp_fake.deliver(whatsapp_fake.notification(number, messages=[whatsapp_fake.text_message("491", "x")]),
                          url=baton.url + whatsapp.WEBHOOK_PATH, app_secret="not-the-secret")
    good, forged = baton.wait_for("", 2)
    assert good.header("X-Hub-Signature-256").startswith("sha256=")
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append(1) or real(a, b))
    assert whatsapp.verify(good.headers, good.body, whatsapp_fake.app_secret)
    assert not whatsapp.verify(forged.headers, forged.body, whatsapp_fake.app_secret)
    assert not whatsapp.verify(good.headers, good.body.replace(b"hi", b"ho"), whatsapp_fake.app_secret)
    bare = good.header("X-Hub-Signature-256").removeprefix("sha256=")
    assert not whatsapp.verify({"X-Hub-Signature-256": bare}, good.body, whatsapp_fake.app_secret)
    assert not whatsapp.verify({}, good.body, whatsapp_fake.app_secret)
    assert len(compared) == 4
