"""Viber's welcome message and keyboards within Viber's limits, against the fake REST Bot API: the
channel's welcome_text answered to conversation_started in the HTTP answer, the deep link's context
reaching the process the reply starts; keyboards laid out within 24 rows, a reply whose text and
keyboard pass 30 KB split so that every call fits, and a keyboard that can never fit refused at deploy."""
from __future__ import annotations

import json

import pytest

from tests.fakes.viber import REQUEST_MAX_BYTES
from tests.fakes.server import encode
from tests.harness import RpcError, bpmn
from tests.integration.messengers.helpers import conversations_of, eventually, new_name
from tests.integration.messengers.test_viber import Account, new_user

WELCOME = "Welcome to Acme!\nWrite us anything."


def welcome_account(api, fake, welcome: str | None = WELCOME, fixture: str | None = "chat_reply.bpmn") -> Account:
    account = Account.__new__(Account)
    account.api, account.fake = api, fake
    account.token = fake.add_account("Acme Support")
    settings = {"auth_token": account.token, "sender_name": "Acme", **({"welcome_text": welcome} if welcome else {})}
    account.channel = api.call("channel.create", type="viber", name=new_name("vb"), settings=settings)
    account.config_id = account.channel["config_id"]
    if fixture:
        from tests.integration.messengers.helpers import deploy_on
        deploy_on(api, fixture, account.channel)
    return account


def test_conversation_started_is_answered_with_the_welcome_and_its_context_reaches_the_process(mapi, fakes):
    fake = fakes.viber
    account = welcome_account(mapi, fake)
    assert account.channel["settings"]["welcome_text"] == WELCOME
    user = new_user()
    opened = account.send(fake.event("conversation_started", user={"id": user, "name": "Jonas"}, type="open",
                                     context="spring-sale", subscribed=False))
    welcome = opened.json()
    assert {k: welcome[k] for k in ("sender", "type", "text")} == {"sender": {"name": "Acme"}, "type": "text",
                                                                   "text": WELCOME}
    mapi.wait_until_idle()
    assert conversations_of(mapi, account.config_id) == [] and account.sent(user) == []

    account.send(fake.message_event(user, "Hi, I saw the sale", tracking_data=welcome["tracking_data"]))
    assert account.texts(user, 1) == ["Hello Ann! You wrote: Hi, I saw the sale"]
    variables = mapi.call("process.status", instance_id=account.conversation(user)["instance_id"])["variables"]
    assert variables["context"] == "spring-sale"


def test_without_a_welcome_or_a_context_conversation_started_is_acknowledged_only(mapi, fakes):
    fake = fakes.viber
    plain = welcome_account(mapi, fake, welcome=None)
    user = new_user()
    assert plain.send(fake.event("conversation_started", user={"id": user}, type="open")).json() == {"ok": True}
    greeted = welcome_account(mapi, fake)
    answer = greeted.send(fake.event("conversation_started", user={"id": user}, type="open")).json()
    assert answer["text"] == WELCOME and "tracking_data" not in answer
    greeted.send(fake.message_event(user, "hello"))
    greeted.texts(user, 1)
    variables = mapi.call("process.status", instance_id=greeted.conversation(user)["instance_id"])["variables"]
    assert "context" not in variables

    mapi.call("channel.update", config_id=greeted.config_id, settings={"welcome_text": None})
    assert "welcome_text" not in mapi.call("channel.get", config_id=greeted.config_id)["settings"]
    assert greeted.send(fake.event("conversation_started", user={"id": new_user()}, type="open")).json() == {
        "ok": True}


@pytest.mark.parametrize("welcome, why", [("x" * 7001, "1 to 7000 characters"), ("bell\x07", "does not look like"),
                                          (42, "must be a string"), ("   ", "does not look like")])
def test_a_welcome_viber_cannot_show_is_refused_and_nothing_is_stored(mapi, fakes, welcome, why):
    token = fakes.viber.add_account("Acme Support")
    name = new_name("vb")
    with pytest.raises(RpcError) as refused:
        mapi.call("channel.create", type="viber", name=name,
                  settings={"auth_token": token, "sender_name": "Acme", "welcome_text": welcome})
    assert refused.value.data["param"] == "settings.welcome_text" and why in refused.value.message
    assert token not in fakes.viber.webhooks
    assert [c for c in mapi.call("channel.list", per_page=100)["items"] if c["name"] == name] == []


def deploy_buttons(api, account, text: str, buttons: list[tuple[str, str]]) -> dict:
    xml = bpmn("chat_buttons.bpmn").replace('name="trigger" value="webchat"', 'name="trigger" value="viber"')
    xml = xml.replace("Was this answer helpful, {{ external_username }}?", text)
    xml = xml.replace("__BUTTONS__", ", ".join(f"{b}:{t}" for b, t in buttons))
    return api.deploy(xml.replace("__CHANNEL__", account.channel["name"]), code=new_name("msg"))


def test_many_buttons_are_laid_out_within_24_rows(mapi, fakes):
    account = welcome_account(mapi, fakes.viber, welcome=None, fixture=None)
    deploy_buttons(mapi, account, "Pick a size", [(f"s{n}", f"Size {n}") for n in range(60)])
    user = new_user()
    account.send(fakes.viber.message_event(user, "sizes?"))
    [sent] = eventually(lambda: account.sent(user), lambda found: len(found) >= 1)
    buttons = sent["keyboard"]["Buttons"]
    assert len(buttons) == 60 and {b["Columns"] for b in buttons} == {2}        # three a row: 20 rows
    assert [b["ActionBody"] for b in buttons][:2] == ["Size 0", "Size 1"]


def test_a_long_text_with_a_big_keyboard_is_split_so_that_every_call_fits_30_kb(mapi, fakes):
    account = welcome_account(mapi, fakes.viber, welcome=None, fixture=None)
    text = " ".join(["€€€€€€€€€"] * 650)                                       # 6,499 characters, 17,549 bytes
    deploy_buttons(mapi, account, text, [(f"b{n}", "€" * 60 + f" {n}") for n in range(20)])
    user = new_user()
    account.send(fakes.viber.message_event(user, "go"))
    sent = eventually(lambda: account.sent(user), lambda found: found and "keyboard" in found[-1])
    assert len(sent) >= 2
    assert all(len(encode({k: v for k, v in s.items() if k not in ("message_token", "token")})) <= REQUEST_MAX_BYTES
               for s in sent)
    assert " ".join(s["text"] for s in sent) == text and "keyboard" not in sent[0]
    assert len(json.loads(sent[-1]["tracking_data"])["baton_buttons"]) == 20


def test_a_keyboard_that_can_never_fit_30_kb_is_refused_at_deploy(mapi, fakes):
    account = welcome_account(mapi, fakes.viber, welcome=None, fixture=None)
    with pytest.raises(RpcError) as refused:
        deploy_buttons(mapi, account, "Pick", [(f"b{n}", "€" * 60 + f"{n:02d}") for n in range(56)])
    [error] = refused.value.data["errors"]
    assert error["element_id"] == "ask" and "30720 bytes" in error["message"], error
