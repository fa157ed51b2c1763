"""WhatsApp's Cloud API against the fake: checking the number, Meta's handshake and signatures, and
sending (text, splitting, interactive buttons both ways, every Graph error code read into sent /
wait / dead / retry)."""
from __future__ import annotations

import hmac

import pytest

from engine.chat.messengers.protocol import InboundCall
from engine.chat.messengers.sending import DEAD, RETRY, SENT, WAIT, Button, OutboundCall
from engine.chat.messengers.whatsapp.cloud_api import RATE_LIMIT_WAIT_S, WEBHOOK_PATH, WhatsApp
from engine.errors import InvalidParamsError, MessengerUnavailableError
from tests.fakes.server import Recorded, Recorder, Reply, encode

PUBLIC = "https://b.example"
whatsapp = WhatsApp()


def settings(number: str, token: str) -> dict:
    return {"phone_number_id": number, "access_token": token, "app_secret": "s" * 32, "verify_token": "v" * 16}


def test_connect_reads_the_number_with_the_bearer_token_and_registers_nothing(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number("Acme Support")
    connection = whatsapp.connect(http, settings(number, token), PUBLIC, api_url=whatsapp_fake.api_url)
    [check] = whatsapp_fake.requests
    assert (check.method, check.path, check.header("Authorization")) == ("GET", f"/v21.0/{number}", f"Bearer {token}")
    assert check.query == {"fields": "id,display_phone_number,verified_name"}
    assert (connection.bot_id, connection.bot_name) == (number, "Acme Support")
    assert (connection.webhook_url, connection.inbound_key) == ("https://b.example/webhooks/whatsapp", number)
    assert connection.details == {"display_phone_number": whatsapp_fake.numbers[number]["display_phone_number"]}
    whatsapp.disconnect(http, settings(number, token), api_url=whatsapp_fake.api_url)
    assert len(whatsapp_fake.requests) == 1


def test_a_bad_token_or_an_unknown_number_is_refused_quoting_meta(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number()
    with pytest.raises(InvalidParamsError) as bad_token:
        whatsapp.connect(http, settings(number, "EAAGwrong"), PUBLIC, api_url=whatsapp_fake.api_url)
    with pytest.raises(InvalidParamsError) as unknown:
        whatsapp.connect(http, settings("999", token), PUBLIC, api_url=whatsapp_fake.api_url)
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
            whatsapp.connect(http, given, PUBLIC, api_url=whatsapp_fake.api_url)
        assert refused.value.data["param"] == param
    assert whatsapp.settings_spec.shown(settings(number, token)) == {"phone_number_id": number}
    assert whatsapp.settings_key(settings(number, token)) == number
    assert whatsapp_fake.requests == []


def test_meta_out_of_order_is_unavailable(http, whatsapp_fake):
    number, token = whatsapp_fake.add_number()
    whatsapp_fake.fail_next(503)
    with pytest.raises(MessengerUnavailableError, match=r"cannot check the number now \(Service temporarily"):
        whatsapp.connect(http, settings(number, token), PUBLIC, api_url=whatsapp_fake.api_url)
    whatsapp_fake.script(Reply(502, b"<html>bad gateway</html>"))
    with pytest.raises(MessengerUnavailableError, match="answered HTTP 502"):
        whatsapp.connect(http, settings(number, token), PUBLIC, api_url=whatsapp_fake.api_url)


# --- the handshake and signatures ----------------------------------------------------------------------

def channels(*verify_tokens: str) -> list[dict]:
    """The settings of channels with these verify tokens, as the handshake reads them."""
    return [{"verify_token": token} for token in verify_tokens]


class HandshakeAnswerer(Recorder):
    """Answers Meta's GET the way Baton's endpoint will, with ``whatsapp.handshake``."""

    def __init__(self, verify_tokens):
        super().__init__()
        self.channels = channels(*verify_tokens)

    def respond(self, request: Recorded) -> Reply:
        challenge = whatsapp.handshake(request.query, self.channels)
        return Reply(200, challenge.encode()) if challenge is not None else Reply(403, b"")


def test_the_handshake_echoes_the_challenge_only_for_a_known_verify_token(whatsapp_fake):
    with HandshakeAnswerer(["other-channel", "my-verify-token"]) as baton:
        assert whatsapp_fake.configure_webhook(baton.url + WEBHOOK_PATH, "my-verify-token")
        assert not whatsapp_fake.configure_webhook(baton.url + WEBHOOK_PATH, "guessed")
        assert baton.requests[0].query["hub.mode"] == "subscribe"
    good = {"hub.mode": "subscribe", "hub.verify_token": "t", "hub.challenge": "1158201444"}
    assert whatsapp.handshake(good, channels("t")) == "1158201444"
    assert whatsapp.handshake({**good, "hub.mode": "unsubscribe"}, channels("t")) is None
    assert whatsapp.handshake({**good, "hub.challenge": ""}, channels("t")) is None
    assert whatsapp.handshake({**good, "hub.challenge": "<script>\n"}, channels("t")) is None
    assert whatsapp.handshake({"hub.mode": "subscribe"}, channels("t")) is None
    assert whatsapp.handshake(good, []) is None
    assert whatsapp.handshake(good, [{}]) is None                # a channel without a verify token matches nothing


def test_the_handshake_compares_every_verify_token_in_constant_time(monkeypatch):
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append(b) or real(a, b))
    query = {"hub.mode": "subscribe", "hub.verify_token": "a", "hub.challenge": "1"}
    assert whatsapp.handshake(query, channels("a", "b", "c")) == "1"
    assert compared == [b"a", b"b", b"c"]          # no early exit on the first match


def test_notifications_verify_with_the_app_secret_over_the_exact_body(whatsapp_fake, baton, monkeypatch):
    number, _ = whatsapp_fake.add_number()
    whatsapp_fake.deliver(whatsapp_fake.notification(number, messages=[whatsapp_fake.text_message("491", "hi")]),
                          url=baton.url + WEBHOOK_PATH)
    whatsapp_fake.deliver(whatsapp_fake.notification(number, messages=[whatsapp_fake.text_message("491", "x")]),
                          url=baton.url + WEBHOOK_PATH, app_secret="not-the-secret")
    good, forged = baton.wait_for("", 2)
    assert good.header("X-Hub-Signature-256").startswith("sha256=")
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append(1) or real(a, b))
    secret = whatsapp.verifying_secret({"app_secret": whatsapp_fake.app_secret}, None)
    assert whatsapp.verify(InboundCall.of(good.body, good.headers), secret)
    assert not whatsapp.verify(InboundCall.of(forged.body, forged.headers), secret)
    assert not whatsapp.verify(InboundCall.of(good.body.replace(b"hi", b"ho"), good.headers), secret)
    bare = good.header("X-Hub-Signature-256").removeprefix("sha256=")
    assert not whatsapp.verify(InboundCall.of(good.body, {"X-Hub-Signature-256": bare}), secret)
    assert not whatsapp.verify(InboundCall.of(good.body, {}), secret)
    assert len(compared) == 4


def test_a_notification_is_for_the_channels_of_the_numbers_it_names(whatsapp_fake):
    body = encode(whatsapp_fake.notification("111", messages=[whatsapp_fake.text_message("491", "hi")]))
    signed = {"X-Hub-Signature-256": "sha256=00"}
    addressed = whatsapp.addressed(InboundCall.of(body, signed))
    assert addressed.keys == ("111",) and [item.text for item in addressed.items] == ["hi"]
    assert whatsapp.key_of(addressed.items[0], addressed.keys) == "111"
    assert whatsapp.addressed(InboundCall.of(body, {})).keys == ()                 # unsigned: names none
    assert whatsapp.addressed(InboundCall.of(b"[1]", signed)).keys == ()           # not a notification


# --- sending ------------------------------------------------------------------------------------------

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
    assert (limited.kind, limited.wait_s) == (WAIT, RATE_LIMIT_WAIT_S)
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
