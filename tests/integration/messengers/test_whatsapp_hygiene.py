"""WhatsApp hygiene: a signed notification for a number or a field no channel of Baton's owns is
answered 200 and ignored (Meta retries anything else for days), an unsigned or wrongly signed one is
still 401; with the channel setting ``mark_read`` a message a process takes is marked as read (and
only then); ``/webhooks/whatsapp`` takes Meta's notifications of up to 3 MB."""
from __future__ import annotations

import json

import requests

from tests.fakes.viber import signature
from tests.integration.messengers.helpers import conversations_of, deliveries_of, eventually, new_name
from tests.integration.messengers.test_whatsapp import VERIFY_TOKEN, Number, new_wa_id


def test_a_signed_notification_for_another_number_or_field_is_200_and_changes_nothing(mapi, fakes):
    fake = fakes.whatsapp
    number = Number(mapi, fake)
    other_number, _token = fake.add_number("Not on Baton")           # same Meta app, no channel
    stranger = new_wa_id()
    answer = fake.deliver(fake.notification(other_number, messages=[fake.text_message(stranger, "hello?")]))
    assert (answer.status_code, answer.json()) == (200, {"ok": True})
    assert fake.deliver(fake.account_update()).status_code == 200
    assert fake.deliver(fake.account_update(), app_secret="forged").status_code == 401
    assert fake.deliver(fake.notification(other_number, messages=[fake.text_message(stranger, "x")]),
                        app_secret="forged").status_code == 401
    mapi.wait_until_idle()
    assert conversations_of(mapi, number.config_id) == [] and deliveries_of(mapi, number.config_id) == []
    assert not [s for s in fake.sent if s["to"] == stranger]


def test_mark_read_marks_the_messages_a_process_takes(mapi, fakes):
    fake = fakes.whatsapp
    number = Number(mapi, fake)
    mapi.call("channel.update", config_id=number.config_id, settings={"mark_read": True})
    assert mapi.call("channel.get", config_id=number.config_id)["settings"]["mark_read"] is True
    customer = new_wa_id()
    first, second = fake.text_message(customer, "hi"), fake.text_message(customer, "again")
    number.notify(messages=[first])
    number.notify(messages=[first, second])                          # a retry: each marked once
    number.texts(customer, 2)
    marked = eventually(lambda: [m["message_id"] for m in fake.read_marks if m["phone_number_id"] == number.number],
                        lambda found: len(found) >= 2)
    mapi.wait_until_idle()
    assert sorted(marked) == sorted([first["id"], second["id"]])
    reads = [d for d in deliveries_of(mapi, number.config_id) if d["event"] == "read"]
    assert [d["status"] for d in reads] == ["sent", "sent"]


def test_without_mark_read_or_without_a_process_nothing_is_marked(mapi, fakes):
    fake = fakes.whatsapp
    plain = Number(mapi, fake)
    customer = new_wa_id()
    plain.notify(messages=[fake.text_message(customer, "hi")])
    plain.texts(customer, 1)
    unbound = Number(mapi, fake, fixture=None)                       # no process bound to it
    mapi.call("channel.update", config_id=unbound.config_id, settings={"mark_read": True})
    unbound.notify(messages=[fake.text_message(new_wa_id(), "anyone?")])
    mapi.wait_until_idle()
    assert not [m for m in fake.read_marks if m["phone_number_id"] in (plain.number, unbound.number)]


def test_mark_read_must_be_true_or_false(mapi, fakes):
    from tests.harness import RpcError
    fake = fakes.whatsapp
    number_id, _token = fake.add_number()
    try:
        mapi.call("channel.create", type="whatsapp", name=new_name("wa"),
                  settings={**fake.channel_settings(number_id, verify_token=VERIFY_TOKEN), "mark_read": "yes"})
    except RpcError as refused:
        assert (refused.reason, refused.data["param"]) == ("invalid_params", "settings.mark_read")
    else:
        raise AssertionError("mark_read 'yes' was accepted")


def test_the_webhook_takes_metas_3_mb_but_not_more(mapi, fakes, messenger_server):
    fake = fakes.whatsapp
    number = Number(mapi, fake)
    customer = new_wa_id()
    notification = fake.notification(number.number, messages=[fake.text_message(customer, "big one")])
    notification["entry"][0]["changes"][0]["value"]["padding"] = "x" * (2_500_000)
    body = json.dumps(notification).encode()
    url = f"{messenger_server.base_url}/webhooks/whatsapp"
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": "sha256=" + signature(fake.app_secret, body)}
    assert 2_000_000 < len(body) < 3 * 1_048_576
    answer = requests.post(url, data=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    number.texts(customer, 1)
    too_big = body + b" " * (3 * 1_048_576 - len(body) + 1)
    refused = requests.post(url, data=too_big, headers=headers, timeout=30)
    assert refused.status_code == 413
