"""WhatsApp end to end against the fake Cloud API: Meta's handshake, the number check, signed batched
notifications taken item by item in order, statuses updating deliveries, reply buttons within Meta's
limits (refused at deploy beyond them), and Meta's error codes: 131047 dead at once, rate limits waited."""
from __future__ import annotations

import json
import random

import pytest
import requests

from tests.fakes.whatsapp import graph_error
from tests.harness import RpcError
from tests.integration.messengers.helpers import (conversations_of, deliveries_of, deploy_on, eventually,
                                                  new_name, settled_deliveries)

VERIFY_TOKEN = "verify-" + new_name("wa")


def new_wa_id() -> str:
    return str(random.randint(10**10, 10**11))


class Number:
    """One WhatsApp channel of the tenant, its number at the fake, and what it sent to each customer."""

    def __init__(self, api, fake, fixture: str | None = "chat_reply.bpmn", **placeholders: str):
        self.api, self.fake = api, fake
        self.number, self.access_token = fake.add_number("Acme Support")
        self.channel = api.call("channel.create", type="whatsapp", name=new_name("wa"),
                                settings=fake.channel_settings(self.number, verify_token=VERIFY_TOKEN))
        self.config_id = self.channel["config_id"]
        if fake.callback_url != self.channel["webhook_url"]:      # what one does in Meta's dashboard
            assert fake.configure_webhook(self.channel["webhook_url"], VERIFY_TOKEN)
        if fixture:
            deploy_on(api, fixture, self.channel, **placeholders)

    def notify(self, *, messages=(), statuses=()) -> requests.Response:
        answer = self.fake.deliver(self.fake.notification(self.number, messages=messages, statuses=statuses))
        assert answer.status_code == 200, answer.text
        return answer

    def sent(self, wa_id: str) -> list[dict]:
        return [s for s in list(self.fake.sent) if s["phone_number_id"] == self.number and s["to"] == wa_id]

    def texts(self, wa_id: str, count: int) -> list[dict]:
        return eventually(lambda: self.sent(wa_id), lambda found: len(found) >= count)

    def conversation(self, wa_id: str) -> dict:
        [found] = eventually(lambda: [c for c in conversations_of(self.api, self.config_id) if c["chat_id"] == wa_id],
                             lambda found: len(found) == 1)
        return found


def test_the_handshake_echoes_the_challenge_only_for_a_known_verify_token(mapi, fakes, messenger_server):
    Number(mapi, fakes.whatsapp, fixture=None)
    url = f"{messenger_server.base_url}/webhooks/whatsapp"
    good = requests.get(url, params={"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN,
                                     "hub.challenge": "1158201444"}, timeout=10)
    assert (good.status_code, good.text, good.headers["Content-Type"]) == (200, "1158201444", "text/plain; charset=utf-8")
    for params in ({"hub.mode": "subscribe", "hub.verify_token": "wrong", "hub.challenge": "1"},
                   {"hub.mode": "unsubscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "1"}, {}):
        assert requests.get(url, params=params, timeout=10).status_code == 403


def test_create_checks_the_number_and_shows_where_to_point_metas_webhook(mapi, fakes, messenger_server):
    number = Number(mapi, fakes.whatsapp, fixture=None)
    shown = mapi.call("channel.get", config_id=number.config_id)
    assert shown["webhook_url"] == f"{messenger_server.base_url}/webhooks/whatsapp"
    assert (shown["bot_id"], shown["bot_name"], shown["settings"]) == (
        number.number, "Acme Support", {"phone_number_id": number.number})
    text = json.dumps(shown)
    assert number.access_token not in text and fakes.whatsapp.app_secret not in text and VERIFY_TOKEN not in text
    with pytest.raises(RpcError) as taken:                # a number's notifications go to one webhook
        mapi.call("channel.create", type="whatsapp", name=new_name("wa"),
                  settings=fakes.whatsapp.channel_settings(number.number))
    assert taken.value.reason == "conflict" and number.number in taken.value.message
    with pytest.raises(RpcError) as refused:
        mapi.call("channel.create", type="whatsapp", name=new_name("wa"),
                  settings=fakes.whatsapp.channel_settings(number.number, access_token="EAAGnot-valid"))
    assert (refused.value.reason, refused.value.data["param"]) == ("invalid_params", "settings.access_token")
    assert "Invalid OAuth access token" in refused.value.message


def test_a_batch_is_taken_item_by_item_in_order_and_a_retry_takes_nothing_twice(mapi, fakes):
    fake = fakes.whatsapp
    number = Number(mapi, fake)
    ann, ben = new_wa_id(), new_wa_id()
    batch = [fake.text_message(ann, "first from Ann"), fake.text_message(ben, "from Ben"),
             fake.text_message(ann, "second from Ann")]
    number.notify(messages=batch)
    number.notify(messages=batch)                                   # Meta retries the whole call
    replies = [m["text"]["body"] for m in number.texts(ann, 2)]
    assert replies == ["Hello Ann! You wrote: first from Ann", "Thanks, noted: second from Ann"]
    assert [m["text"]["body"] for m in number.texts(ben, 1)] == ["Hello Ann! You wrote: from Ben"]
    mapi.wait_until_idle()
    assert (len(number.sent(ann)), len(number.sent(ben))) == (2, 1)
    sent = number.sent(ann)[0]
    assert sent["messaging_product"] == "whatsapp" and sent["text"]["preview_url"] is False


def test_a_bad_or_missing_signature_or_an_unknown_number_is_401(mapi, fakes, messenger_server):
    fake = fakes.whatsapp
    number = Number(mapi, fake)
    notification = fake.notification(number.number, messages=[fake.text_message(new_wa_id(), "let me in")])
    assert fake.deliver(notification, app_secret="wrong").status_code == 401
    body = json.dumps(notification).encode()
    url = f"{messenger_server.base_url}/webhooks/whatsapp"
    assert requests.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=10).status_code == 401
    assert fake.deliver(fake.notification("999000111", messages=[fake.text_message(new_wa_id(), "x")]),
                        app_secret="another-app").status_code == 401
    mapi.wait_until_idle()
    assert conversations_of(mapi, number.config_id) == []


def test_statuses_update_the_delivery_and_a_closed_window_fails_it(mapi, fakes):
    fake = fakes.whatsapp
    number = Number(mapi, fake, "chat_operator.bpmn")
    customer = new_wa_id()
    number.notify(messages=[fake.text_message(customer, "hi")])
    binding = number.conversation(customer)["binding_id"]
    mapi.call("conversation.send", binding_id=binding, text="Hello from Acme")
    [sent] = settled_deliveries(mapi, number.config_id, 1)
    wamid = sent["external_id"]
    assert wamid.startswith("wamid.")
    number.notify(statuses=[fake.status(wamid, "delivered", customer), fake.status(wamid, "read", customer),
                            fake.status(wamid, "delivered", customer)])    # out of order: read stays read
    [read] = eventually(lambda: deliveries_of(mapi, number.config_id), lambda found: found[0]["receipt"] == "read")
    assert read["status"] == "sent"
    fake.close_window(customer)
    mapi.call("conversation.send", binding_id=binding, text="A day later")
    dead = settled_deliveries(mapi, number.config_id, 2)[1]
    assert (dead["status"], dead["attempts"]) == ("dead", 1)
    assert "131047" in dead["last_error"] and "24 hours" in dead["last_error"]


def test_rate_limits_are_waited_for_then_sent(idle, fakes):
    fake, mapi = fakes.whatsapp, idle
    number = Number(mapi, fake, "chat_operator.bpmn")
    customer = new_wa_id()
    number.notify(messages=[fake.text_message(customer, "hi")])
    binding = number.conversation(customer)["binding_id"]
    fake.script(fake_rate_limit(), path_endswith=f"{number.number}/messages")
    mapi.call("conversation.send", binding_id=binding, text="after the limit")
    [sent] = settled_deliveries(mapi, number.config_id, 1, timeout=90)
    assert (sent["status"], sent["attempts"]) == ("sent", 2)


def fake_rate_limit():
    # Meta's 130429 with a Retry-After of one second (its own answers carry none: Baton then waits a minute).
    reply = graph_error(400, 130429, "(#130429) Rate limit hit", "Cloud API message throughput has been reached.")
    reply.headers["Retry-After"] = "1"
    return reply


def test_reply_buttons_go_out_and_come_back_and_too_many_are_refused_at_deploy(mapi, fakes):
    fake = fakes.whatsapp
    number = Number(mapi, fake, "chat_buttons.bpmn", buttons="yes:Yes please, no:No thanks")
    customer = new_wa_id()
    number.notify(messages=[fake.text_message(customer, "hi")])
    [question] = number.texts(customer, 1)
    assert question["type"] == "interactive"
    assert [b["reply"] for b in question["interactive"]["action"]["buttons"]] == [
        {"id": "yes", "title": "Yes please"}, {"id": "no", "title": "No thanks"}]
    number.notify(messages=[fake.button_reply(customer, question, "No thanks")])
    assert number.texts(customer, 2)[1]["text"]["body"] == "You chose no (No thanks), a button."
    with pytest.raises(RpcError) as refused:
        deploy_on(mapi, "chat_buttons.bpmn", number.channel, buttons="a:One, b:Two, c:Three, d:Four")
    [refusal] = refused.value.data["errors"]
    assert refusal["element_id"] == "ask" and "at most 3 reply buttons" in refusal["message"]
