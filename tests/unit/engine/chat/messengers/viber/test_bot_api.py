"""Viber against the fake REST Bot API: connect (with Viber's webhook check), signatures, callbacks,
keyboards both ways, splitting, and every answer read from the body of an HTTP 200."""
from __future__ import annotations

import hmac

import pytest

from engine.chat.messengers.protocol import InboundCall
from engine.chat.messengers.viber.bot_api import (EVENT_TYPES, KEYBOARD_MIN_API_VERSION, WEBHOOK_PATH, Viber,
                                                  channel_key, new_channel_key)
from engine.chat.messengers.items import DELIVERY_STATUS, IGNORED, REACHABLE, UNREACHABLE
from engine.chat.messengers.sending import DEAD, RETRY, SENT, WAIT, Button
from engine.errors import BadRequestError, InvalidParamsError, MessengerUnavailableError
from tests.fakes.server import Reply, encode


viber = Viber()


def settings(token: str, sender_name: str = "Acme") -> dict:
    return {"auth_token": token, "sender_name": sender_name}


def connect(http, fake, baton, token):
    return viber.connect(http, settings(token), baton.url, api_url=fake.api_url)


def signed(recorded) -> InboundCall:
    return InboundCall.of(recorded.body, recorded.headers, recorded.query)


def send_all(http, fake, token, chat_id, text, buttons=(), sender_name="Acme"):
    outcomes = []
    for outbound in viber.calls(chat_id, text, buttons):
        request = viber.request(settings(token, sender_name), outbound, api_url=fake.api_url)
        outcomes.append(viber.classify(http.request(request.method, request.url, headers=request.headers,
                                                    body=request.body)))
    return outcomes


# --- connect -------------------------------------------------------------------------------------------

def test_connect_checks_the_token_and_registers_after_viber_checks_the_url(http, viber_fake, baton):
    token = viber_fake.add_account("Acme Support")
    connection = connect(http, viber_fake, baton, token)

    assert [r.path for r in viber_fake.requests] == ["/pa/get_account_info", "/pa/set_webhook"]
    assert all(r.header("X-Viber-Auth-Token") == token for r in viber_fake.requests)
    key = connection.inbound_key
    assert viber_fake.requests[1].json() == {"url": f"{baton.url}/channels/viber/inbound?channel={key}",
                                             "event_types": list(EVENT_TYPES), "send_name": True,
                                             "send_photo": False}
    [check] = baton.wait_for("", 1)
    assert (check.path, check.query) == (WEBHOOK_PATH, {"channel": key})
    assert viber.answers_at_once(signed(check)) and viber.verify(signed(check), token)
    assert viber.addressed(signed(check)).keys == (key,)
    assert [item.event for item in viber.parse(check.body)] == ["webhook"]
    assert (connection.bot_name, connection.bot_id) == ("Acme Support", viber_fake.accounts[token]["id"])
    assert connection.details == {"bot_uri": "acmesupport"} and connection.webhook_secret is None
    assert viber_fake.webhooks[token]["url"] == connection.webhook_url
    assert viber.registered_webhook(http, settings(token), api_url=viber_fake.api_url) == connection.webhook_url


def test_registration_fails_when_the_webhook_does_not_answer_viber_with_200(http, viber_fake, baton):
    token = viber_fake.add_account()
    baton.answer = Reply(404, {"error": "nope"})
    with pytest.raises(InvalidParamsError) as refused:
        connect(http, viber_fake, baton, token)
    assert refused.value.data["param"] == "webhook_url"
    assert refused.value.message.endswith(": invalidUrl (status 1)")
    assert token not in viber_fake.webhooks


def test_a_token_viber_does_not_know_is_refused_quoting_viber(http, viber_fake, baton):
    with pytest.raises(InvalidParamsError) as refused:
        connect(http, viber_fake, baton, "no-such-token")
    assert refused.value.message == "Viber refused the auth_token: invalidAuthToken (status 2)"
    assert refused.value.data == {"param": "settings.auth_token", "messenger_error": "invalidAuthToken (status 2)"}
    assert baton.requests == []


def test_viber_settings_are_exactly_auth_token_and_a_sender_name_of_at_most_28(http, viber_fake, baton):
    token = viber_fake.add_account()
    for given, param in [({"auth_token": token}, "settings.sender_name"),
                         (settings(token, "x" * 29), "settings.sender_name"),
                         (settings(token, "   "), "settings.sender_name"),
                         (settings("has space"), "settings.auth_token"),
                         ({**settings(token), "avatar": "x"}, "settings")]:
        with pytest.raises(InvalidParamsError) as refused:
            viber.connect(http, given, "https://b.example", api_url=viber_fake.api_url)
        assert refused.value.data["param"] == param
    assert viber.settings_spec.shown(settings(token)) == {"sender_name": "Acme"}
    assert viber.settings_spec.secrets_of(settings(token)) == [token]
    assert viber.verifying_secret(settings(token), None) == token


def test_an_unreachable_or_broken_viber_is_unavailable(http, viber_fake, baton):
    token = viber_fake.add_account()
    viber_fake.http_error_next(503)
    with pytest.raises(MessengerUnavailableError, match="Viber answered HTTP 503"):
        connect(http, viber_fake, baton, token)
    viber_fake.fail_next(12, "tooManyRequests", method="get_account_info")
    with pytest.raises(MessengerUnavailableError, match="tooManyRequests"):
        connect(http, viber_fake, baton, token)
    gone = viber_fake.api_url
    viber_fake.stop()
    with pytest.raises(MessengerUnavailableError, match="could not be reached"):
        viber.connect(http, settings(token), "https://b.example", api_url=gone)


def test_disconnect_sets_an_empty_webhook(http, viber_fake, baton):
    token = viber_fake.add_account()
    connect(http, viber_fake, baton, token)
    viber.disconnect(http, settings(token), api_url=viber_fake.api_url)
    assert viber_fake.requests[-1].json() == {"url": ""} and token not in viber_fake.webhooks


def test_the_channel_key_comes_from_the_webhook_query():
    key = new_channel_key()
    assert channel_key({"channel": key}) == key
    assert channel_key({}) is None and channel_key({"channel": "a/b"}) is None
    assert viber.addressed(InboundCall.of(b"{}", query={"channel": "a/b"})).keys == ()


# --- inbound -------------------------------------------------------------------------------------------

def test_signatures_verify_only_for_the_exact_body_and_token(http, viber_fake, baton, monkeypatch):
    token = viber_fake.add_account()
    connect(http, viber_fake, baton, token)
    viber_fake.deliver(token, viber_fake.message_event("u1", "hello"))
    viber_fake.deliver(token, viber_fake.message_event("u1", "forged"), signed_with="someone-else")
    good, forged = baton.wait_for("", 3)[1:]
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append(1) or real(a, b))
    assert viber.verify(signed(good), token)
    assert not viber.verify(signed(forged), token)
    assert not viber.verify(InboundCall.of(good.body + b" ", good.headers), token)
    assert not viber.verify(InboundCall.of(good.body, {}), token)
    assert not viber.verify(InboundCall.of(good.body, {"X-Viber-Content-Signature": "zz\u00e9"}), token)
    assert len(compared) == 4                # every present signature went through compare_digest


def test_a_text_message_and_a_pressed_button(http, viber_fake):
    token = viber_fake.add_account()
    text = viber.parse(encode(viber_fake.message_event("u1==", "Hi there", name="Ann")))[0]
    assert (text.chat_id, text.text, text.display_name, text.message_type) == ("u1==", "Hi there", "Ann", "text")
    assert text.dedup_id.isdigit()
    send_all(http, viber_fake, token, "u1==", "Pick one", [Button("yes", "Yes <b>"), Button("no", "No")])
    pressed = viber.parse(encode(viber_fake.pressed("u1==", viber_fake.sent[0], "Yes <b>")))[0]
    assert (pressed.message_type, pressed.text, pressed.button_id) == ("button", "Yes <b>", "yes")
    typed_reply = viber_fake.message_event("u1==", "Maybe", tracking_data=viber_fake.sent[0]["tracking_data"])
    typed = viber.parse(encode(typed_reply))[0]
    assert (typed.message_type, typed.button_id) == ("text", None)


@pytest.mark.parametrize("message, message_type, attachment", [
    ({"type": "picture", "text": "look", "media": "https://dl.viber/p.jpg", "thumbnail": "https://dl.viber/t.jpg",
      "file_name": "p.jpg", "size": 2048},
     "photo", {"type": "photo", "url": "https://dl.viber/p.jpg", "name": "p.jpg", "size": 2048,
               "thumbnail": "https://dl.viber/t.jpg"}),
    ({"type": "file", "media": "https://dl.viber/f.pdf", "file_name": "f.pdf", "size": 99},
     "document", {"type": "document", "url": "https://dl.viber/f.pdf", "name": "f.pdf", "size": 99}),
    ({"type": "video", "media": "https://dl.viber/v.mp4", "size": 5, "duration": 7},
     "video", {"type": "video", "url": "https://dl.viber/v.mp4", "size": 5, "duration": 7}),
    ({"type": "sticker", "sticker_id": 46105, "media": "https://dl.viber/s.png"},
     "sticker", {"type": "sticker", "url": "https://dl.viber/s.png", "sticker_id": 46105}),
    ({"type": "location", "location": {"lat": 50.7, "lon": 6.1}},
     "location", {"type": "location", "latitude": 50.7, "longitude": 6.1}),
    ({"type": "contact", "contact": {"name": "Bob", "phone_number": "+491234"}},
     "contact", {"type": "contact", "name": "Bob", "phone_number": "+491234"}),
])
def test_non_text_messages_keep_the_media_url_name_and_size(viber_fake, message, message_type, attachment):
    item = viber.parse(encode(viber_fake.message_event("u1", **message)))[0]
    assert item.message_type == message_type
    assert item.variables()["attachments"] == [attachment]
    assert item.text == message.get("text", "")


def test_urls_are_text_and_unknown_types_are_unsupported(viber_fake):
    url = viber.parse(encode(viber_fake.message_event("u1", type="url", media="https://shop.example/1")))[0]
    rich = viber.parse(encode(viber_fake.message_event("u1", type="rich_media", rich_media={})))[0]
    assert (url.message_type, url.text) == ("text", "https://shop.example/1")
    assert (rich.message_type, rich.attachments) == ("unsupported", ())


def test_receipts_subscriptions_and_checks_are_events(viber_fake):
    def one(event, **fields):
        return viber.parse(encode(viber_fake.event(event, **fields)))[0]
    delivered = one("delivered", user_id="u1")
    seen = one("seen", user_id="u1")
    failed = one("failed", user_id="u1", desc="failure description")
    assert [(e.kind, e.status, e.chat_id) for e in (delivered, seen, failed)] == [
        (DELIVERY_STATUS, "delivered", "u1"), (DELIVERY_STATUS, "read", "u1"), (DELIVERY_STATUS, "failed", "u1")]
    assert failed.reason == "failure description" and failed.message_id.isdigit()
    assert failed.dedup_id == f"failed:{failed.message_id}"
    gone = one("unsubscribed", user_id="u2")
    back = one("subscribed", user={"id": "u2", "name": "Ann"})
    started = one("conversation_started", type="open", user={"id": "u3"}, subscribed=False)
    assert (gone.kind, gone.chat_id, gone.reason) == (UNREACHABLE, "u2", "the user unsubscribed from the bot")
    assert (back.kind, back.chat_id) == (REACHABLE, "u2")
    assert (started.kind, started.event, started.chat_id) == (IGNORED, "conversation_started", "u3")


def test_malformed_viber_calls(viber_fake):
    with pytest.raises(BadRequestError, match="no 'event'"):
        viber.parse(b'{"message_token": 1}')
    with pytest.raises(BadRequestError, match="not valid JSON"):
        viber.parse(b"{")
    assert not viber.answers_at_once(InboundCall.of(b"{")) and \
        not viber.answers_at_once(InboundCall.of(b'{"event": "message"}'))
    item = viber.parse(b'{"event": "message", "message_token": 5, "message": {"type": "text", "text": "x"}}')[0]
    assert (item.kind, item.dedup_id) == (IGNORED, "message:5")


# --- outbound ------------------------------------------------------------------------------------------

def test_a_reply_carries_the_sender_name_and_long_texts_are_split(http, viber_fake):
    token = viber_fake.add_account()
    words = [f"w{n:06d}" for n in range(2500)]                       # 19,999 characters
    outcomes = send_all(http, viber_fake, token, "u1", " ".join(words), sender_name="Acme Care")
    assert [o.kind for o in outcomes] == [SENT] * 3
    assert [o.message_id for o in outcomes] == [str(s["message_token"]) for s in viber_fake.sent]
    assert all(s["sender"] == {"name": "Acme Care"} and len(s["text"]) <= 7000 for s in viber_fake.sent)
    assert " ".join(s["text"] for s in viber_fake.sent).split() == words
    assert all("keyboard" not in s and "min_api_version" not in s for s in viber_fake.sent)


def test_buttons_are_a_keyboard_with_min_api_version_on_the_last_part(http, viber_fake):
    token = viber_fake.add_account()
    send_all(http, viber_fake, token, "u1", "a " * 4000, [Button("y", "Yes"), Button("n", "No")])
    first, last = viber_fake.sent
    assert "keyboard" not in first
    assert last["min_api_version"] == KEYBOARD_MIN_API_VERSION
    assert [(b["ActionType"], b["ActionBody"], b["Text"]) for b in last["keyboard"]["Buttons"]] == [
        ("reply", "Yes", "Yes"), ("reply", "No", "No")]


@pytest.mark.parametrize("code, message, kind", [
    (6, "receiverNotSubscribed", DEAD), (5, "receiverNotRegistered", DEAD), (11, "receiverNoSuitableDevice", DEAD),
    (3, "badData", DEAD), (2, "invalidAuthToken", RETRY), (10, "webhookNotSet", RETRY),
    (12, "tooManyRequests", WAIT), (7, "publicAccountBlocked", RETRY), (99, "generalError", RETRY)])
def test_viber_statuses_in_an_http_200_are_read_from_the_body(http, viber_fake, code, message, kind):
    token = viber_fake.add_account()
    viber_fake.fail_next(code, message)
    [outcome] = send_all(http, viber_fake, token, "u1", "hi")
    assert (outcome.kind, outcome.reason) == (kind, f"{message} (status {code})")


def test_an_unsubscribed_receiver_is_dead_and_server_errors_are_retried(http, viber_fake):
    token = viber_fake.add_account()
    viber_fake.unsubscribe("gone")
    assert send_all(http, viber_fake, token, "gone", "hi")[0].kind == DEAD
    viber_fake.http_error_next(500)
    retried = send_all(http, viber_fake, token, "u1", "hi")[0]
    assert (retried.kind, retried.reason) == (RETRY, "Viber answered HTTP 500 without a REST API answer.")
    assert viber_fake.sent == []


def test_viber_button_limits_are_refused_at_deploy(http, viber_fake):
    long_title = "x" * 251
    assert viber.button_refusals([Button("a", "x" * 250)]) == []
    assert viber.button_refusals([Button("a", long_title)]) == [
        f"Button title '{'x' * 40}...' is longer than Viber's 250 characters."]
    many = [Button(f"id-{n}-" + "i" * 60, f"title {n} " + "t" * 60) for n in range(40)]
    assert viber.button_refusals(many) == ["The buttons' titles and ids together are too long for Viber: they "
                                           "must fit in 4000 characters of tracking data."]
    with pytest.raises(InvalidParamsError, match="Viber cannot carry these buttons"):
        viber.calls("u1", "x", [Button("a", long_title)])
    token = viber_fake.add_account()
    forced = viber.calls("u1", "x", [Button("a", "A")])[0]
    forced.payload["keyboard"]["Buttons"][0]["Text"] = long_title
    request = viber.request(settings(token), forced, api_url=viber_fake.api_url)
    answer = http.request(request.method, request.url, headers=request.headers, body=request.body)
    assert viber.classify(answer).kind == DEAD                               # the fake refuses it as Viber does
