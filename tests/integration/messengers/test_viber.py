"""Viber end to end against the fake REST Bot API: connecting through Viber's own webhook check,
HMAC-signed callbacks verified and deduplicated, replies with the sender name, keyboards both ways,
long texts split, delivery receipts, unsubscribed customers and Viber's refusals read from HTTP 200."""
from __future__ import annotations

import json
import secrets

import pytest
import requests

from tests.harness import RpcError
from tests.integration.messengers.helpers import (conversations_of, deliveries_of, deploy_on, eventually,
                                                  messages_of, new_name, settled_deliveries)


def new_user() -> str:
    return secrets.token_urlsafe(12) + "=="


class Account:
    """One Viber channel of the tenant, its account at the fake, and what it sent to each user."""

    def __init__(self, api, fake, fixture: str | None = "chat_reply.bpmn", **placeholders: str):
        self.api, self.fake = api, fake
        self.token = fake.add_account("Acme Support")
        self.channel = api.call("channel.create", type="viber", name=new_name("vb"),
                                settings={"auth_token": self.token, "sender_name": "Acme"})
        self.config_id = self.channel["config_id"]
        if fixture:
            deploy_on(api, fixture, self.channel, **placeholders)

    def send(self, callback: dict, **signing) -> requests.Response:
        answer = self.fake.deliver(self.token, callback, **signing)
        assert answer.status_code == 200, answer.text
        return answer

    def sent(self, user: str) -> list[dict]:
        return [s for s in list(self.fake.sent) if s["token"] == self.token and s["receiver"] == user]

    def texts(self, user: str, count: int) -> list[str]:
        return [s["text"] for s in eventually(lambda: self.sent(user), lambda found: len(found) >= count)]

    def conversation(self, user: str) -> dict:
        [found] = eventually(lambda: [c for c in conversations_of(self.api, self.config_id) if c["chat_id"] == user],
                             lambda found: len(found) == 1)
        return found


def test_create_passes_vibers_webhook_check_and_shows_no_secret(mapi, fakes, messenger_server):
    fake = fakes.viber
    checks_before = len(fake.webhook_checks)
    account = Account(mapi, fake, fixture=None)
    channel = account.channel
    assert [answer.status_code for answer in fake.webhook_checks[checks_before:]] == [200]
    assert fake.webhooks[account.token]["url"] == channel["webhook_url"]
    assert channel["webhook_url"].startswith(f"{messenger_server.base_url}/channels/viber/inbound?channel=")
    assert set(fake.webhooks[account.token]["event_types"]) == {"delivered", "seen", "failed", "subscribed",
                                                                "unsubscribed", "conversation_started"}
    assert (channel["bot_name"], channel["settings"], channel["bot_uri"]) == ("Acme Support", {"sender_name": "Acme"},
                                                                               "acmesupport")
    assert account.token not in json.dumps(mapi.call("channel.get", config_id=account.config_id))
    mapi.call("channel.delete", config_id=account.config_id)
    assert account.token not in fake.webhooks                       # set_webhook with an empty url


def test_a_token_viber_refuses_is_invalid_params_quoting_viber(mapi):
    name = new_name("vb-bad")
    with pytest.raises(RpcError) as refused:
        mapi.call("channel.create", type="viber", name=name, settings={"auth_token": "4a1-not-known",
                                                                      "sender_name": "Acme"})
    assert (refused.value.reason, refused.value.data["param"]) == ("invalid_params", "settings.auth_token")
    assert refused.value.message == "Viber refused the auth_token: invalidAuthToken (status 2)"
    assert name not in [c["name"] for c in mapi.call("channel.list", per_page=100)["items"]]


def test_a_message_is_answered_with_the_sender_name_and_the_next_one_reaches_the_process(mapi, fakes):
    account = Account(mapi, fakes.viber)
    user = new_user()
    account.send(fakes.viber.message_event(user, "Hallo", name="Jonas"))
    assert account.texts(user, 1) == ["Hello Jonas! You wrote: Hallo"]
    [reply] = account.sent(user)
    assert (reply["sender"], reply["type"]) == ({"name": "Acme"}, "text") and "keyboard" not in reply
    conversation = account.conversation(user)
    assert (conversation["channel"], conversation["external_user_id"]) == ("viber", user)
    account.send(fakes.viber.message_event(user, "order 7", name="Jonas"))
    assert account.texts(user, 2)[1] == "Thanks, noted: order 7"


def test_unsigned_wrongly_signed_or_unknown_callbacks_are_401(mapi, fakes, messenger_server):
    account = Account(mapi, fakes.viber)
    url = fakes.viber.webhooks[account.token]["url"]
    body = json.dumps(fakes.viber.message_event(new_user(), "let me in")).encode()
    unknown = f"{messenger_server.base_url}/channels/viber/inbound?channel=0123456789abcdef"
    for target, headers in ((url, {}), (url, {"X-Viber-Content-Signature": "00" * 32}), (unknown, {})):
        answer = requests.post(target, data=body, headers={"Content-Type": "application/json", **headers}, timeout=10)
        assert answer.status_code == 401
    answer = account.fake.deliver(account.token, fakes.viber.message_event(new_user(), "x"), signed_with="other")
    assert answer.status_code == 401
    mapi.wait_until_idle()
    assert conversations_of(mapi, account.config_id) == []


def test_a_retried_callback_is_taken_once_and_conversation_started_starts_nothing(mapi, fakes):
    account = Account(mapi, fakes.viber)
    user = new_user()
    account.send(fakes.viber.event("conversation_started", user={"id": user, "name": "Jonas"}, type="open"))
    mapi.wait_until_idle()
    assert conversations_of(mapi, account.config_id) == []
    callback = fakes.viber.message_event(user, "once")
    account.send(callback)
    account.send(callback)
    account.texts(user, 1)
    mapi.wait_until_idle()
    assert len(account.sent(user)) == 1
    assert [m["direction"] for m in messages_of(mapi, account.conversation(user)["binding_id"])] == ["in", "out"]


def test_a_keyboard_goes_out_and_a_pressed_button_comes_back_with_its_id(mapi, fakes):
    account = Account(mapi, fakes.viber, "chat_buttons.bpmn", buttons="yes:Yes please, no:No thanks")
    user = new_user()
    account.send(fakes.viber.message_event(user, "hi"))
    [question] = [s for s in eventually(lambda: account.sent(user), bool)]
    assert [b["ActionBody"] for b in question["keyboard"]["Buttons"]] == ["Yes please", "No thanks"]
    assert question["min_api_version"] >= 3
    account.send(fakes.viber.pressed(user, question, "Yes please"))
    assert account.texts(user, 2)[1] == "You chose yes (Yes please), a button."


def test_pictures_arrive_as_photos_with_their_url(mapi, fakes):
    account = Account(mapi, fakes.viber, "chat_collect.bpmn")
    user = new_user()
    account.send(fakes.viber.message_event(user, "the lid", type="picture", media="https://dl.viber.com/p.jpg",
                                           size=20480, file_name="p.jpg"))
    variables = mapi.call("process.status", instance_id=account.conversation(user)["instance_id"])["variables"]
    assert (variables["message_text"], variables["message_type"]) == ("the lid", "photo")
    [attachment] = variables["attachments"]
    assert len(attachment.pop("attachment_id")) == 32                     # Baton's id: GET /v1/media/...
    assert attachment == {"type": "photo", "url": "https://dl.viber.com/p.jpg", "name": "p.jpg", "size": 20480}


def test_a_long_answer_is_split_at_7000_characters_in_order(mapi, fakes):
    account = Account(mapi, fakes.viber, "chat_long_answer.bpmn")
    user = new_user()
    words = " ".join(f"w{i:04d}" for i in range(500))
    account.send(fakes.viber.message_event(user, words))
    parts = account.texts(user, 2)
    assert [len(part) <= 7000 for part in parts] == [True, True]
    assert " ".join(parts).split() == (" ".join([words] * 3)).split()


def test_receipts_update_the_delivery_and_unsubscribed_customers_get_no_more_calls(mapi, fakes):
    fake = fakes.viber
    account = Account(mapi, fake, "chat_operator.bpmn")
    user, gone = new_user(), new_user()
    account.send(fake.message_event(user, "hi"))
    binding = account.conversation(user)["binding_id"]
    mapi.call("conversation.send", binding_id=binding, text="first")
    mapi.call("conversation.send", binding_id=binding, text="second")
    first, second = settled_deliveries(mapi, account.config_id, 2)
    account.send(fake.event("delivered", message_token=int(first["external_id"]), user_id=user))
    account.send(fake.event("seen", message_token=int(first["external_id"]), user_id=user))
    account.send(fake.event("failed", message_token=int(second["external_id"]), user_id=user, desc="no device"))
    first, second = eventually(lambda: deliveries_of(mapi, account.config_id),
                               lambda found: found[1]["status"] == "dead")
    assert (first["status"], first["receipt"]) == ("sent", "read")
    assert (second["receipt"], second["last_error"]) == ("failed", "The messenger reported it failed: no device")
    assert [m["delivery"] for m in messages_of(mapi, binding) if m["direction"] == "out"] == ["sent", "dead"]

    account.send(fake.event("unsubscribed", user_id=user))
    mapi.call("conversation.send", binding_id=binding, text="still there?")
    assert settled_deliveries(mapi, account.config_id, 3)[2]["last_error"] == \
        "The customer cannot be reached: the user unsubscribed from the bot."
    fake.unsubscribe(gone)                       # Viber's own refusal: status 6, in an HTTP 200
    account.send(fake.message_event(gone, "hello"))
    binding_gone = account.conversation(gone)["binding_id"]
    mapi.call("conversation.send", binding_id=binding_gone, text="hi")
    dead = eventually(lambda: [d for d in deliveries_of(mapi, account.config_id) if d["status"] == "dead"],
                      lambda found: len(found) == 3)
    assert (dead[2]["attempts"], dead[2]["last_error"]) == (
        1, "Viber refused it for good: receiverNotSubscribed (status 6)")
