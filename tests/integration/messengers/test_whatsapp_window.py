"""WhatsApp's 24-hour customer-service window: Baton knows when the customer last wrote (inbound
only), shows when the window closes, sends a send_message step's or conversation.send's template
instead of the text once it is closed, and without a template makes the reply dead (window_closed)
before any call to Meta. Bad templates are refused at deploy or at the call, and nothing is sent.

The window is closed by moving the customer's last message 25 hours back in the database: the one
thing a test cannot wait for."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import create_engine, text

from tests.harness import RpcError, bpmn
from tests.integration.messengers.helpers import (conversations_of, deliveries_of, eventually, new_name,
                                                  settled_deliveries)
from tests.integration.messengers.test_telegram_chats import Bot
from tests.integration.messengers.test_whatsapp import Number, new_wa_id


def age_window(server, binding_id: int, hours: float = 25) -> None:
    """The customer last wrote ``hours`` ago."""
    engine = create_engine(server.database_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE conversations SET customer_wrote_at = :at WHERE id = :id"),
                               {"at": datetime.utcnow() - timedelta(hours=hours), "id": binding_id})
    finally:
        engine.dispose()


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).replace(tzinfo=None)


def started(mapi, fake, fixture: str):
    number = Number(mapi, fake, fixture)
    customer = new_wa_id()
    number.notify(messages=[fake.text_message(customer, "hi")])
    return number, customer, number.conversation(customer)


def test_the_window_is_when_the_customer_last_wrote_and_replies_do_not_move_it(mapi, fakes):
    number, customer, conversation = started(mapi, fakes.whatsapp, "chat_operator.bpmn")
    wrote = parse_time(conversation["customer_wrote_at"])
    assert parse_time(conversation["window_closes_at"]) - wrote == timedelta(hours=24)
    mapi.call("conversation.send", binding_id=conversation["binding_id"], text="We are on it")
    settled_deliveries(mapi, number.config_id, 1)
    after = number.conversation(customer)
    assert after["customer_wrote_at"] == conversation["customer_wrote_at"]
    assert parse_time(after["last_message_at"]) >= wrote                       # replies still move this one
    bot = Bot(mapi, fakes.telegram)
    chat = 55_000 + int(new_wa_id()) % 10**6
    bot.say(chat, "hi")
    assert bot.conversation(chat)["window_closes_at"] is None                  # no window on Telegram


def test_a_closed_window_without_a_template_is_dead_before_any_call_to_meta(mapi, fakes, messenger_server):
    fake = fakes.whatsapp
    number, customer, conversation = started(mapi, fake, "chat_operator.bpmn")
    age_window(messenger_server, conversation["binding_id"])
    calls_before = len(number.sent(customer))
    mapi.call("conversation.send", binding_id=conversation["binding_id"], text="Are you still there?")
    [dead] = settled_deliveries(mapi, number.config_id, 1)
    assert (dead["status"], dead["attempts"]) == ("dead", 0)
    assert "window is closed" in dead["last_error"] and "Nothing was sent" in dead["last_error"]
    assert len(number.sent(customer)) == calls_before == 0
    closes = parse_time(number.conversation(customer)["window_closes_at"])
    assert closes < datetime.utcnow()


def test_conversation_send_with_a_template_sends_the_text_while_open_and_the_template_once_closed(
        mapi, fakes, messenger_server):
    fake = fakes.whatsapp
    fake.approve_template("follow_up", "en_US", params=1)
    number, customer, conversation = started(mapi, fake, "chat_operator.bpmn")
    binding = conversation["binding_id"]
    template = {"name": "follow_up", "language": "en_US", "params": ["Ann"]}
    mapi.call("conversation.send", binding_id=binding, text="Open: plain text", template=template)
    [first] = number.texts(customer, 1)
    assert (first["type"], first["text"]["body"]) == ("text", "Open: plain text")
    age_window(messenger_server, binding)
    mapi.call("conversation.send", binding_id=binding, text="Closed: this text is not sent", template=template)
    mapi.call("conversation.send", binding_id=binding, template=template)     # a template alone
    sent = number.texts(customer, 3)
    assert [s["type"] for s in sent] == ["text", "template", "template"]
    assert sent[1]["template"] == {"name": "follow_up", "language": {"code": "en_US"},
                                   "components": [{"type": "body", "parameters": [{"type": "text", "text": "Ann"}]}]}
    deliveries = settled_deliveries(mapi, number.config_id, 3)
    assert [d["status"] for d in deliveries] == ["sent", "sent", "sent"]
    messages = mapi.call("conversation.messages", binding_id=binding)["items"]
    assert messages[0]["text"] == "(template follow_up)" and messages[0]["template"]["params"] == ["Ann"]


def test_a_send_message_step_renders_its_template_and_a_long_reply_becomes_one_template(
        mapi, fakes, messenger_server):
    fake = fakes.whatsapp
    fake.approve_template("order_shipped", "en_US", params=2)
    number, customer, conversation = started(mapi, fake, "chat_template.bpmn")
    age_window(messenger_server, conversation["binding_id"])
    [task] = eventually(lambda: mapi.call("task.list", instance_id=conversation["instance_id"])["items"], bool)
    details = " ".join(["The parcel is packed."] * 300)                        # over 4096: two parts
    mapi.call("task.complete", task_id=task["task_id"], result={"order": "A-17", "details": details})
    assert mapi.wait_for(conversation["instance_id"])["status"] == "completed"
    [sent] = number.texts(customer, 1)
    assert sent["type"] == "template" and sent["template"]["name"] == "order_shipped"
    assert [p["text"] for p in sent["template"]["components"][0]["parameters"]] == ["Ann", "A-17"]
    deliveries = settled_deliveries(mapi, number.config_id, 2)
    assert [d["status"] for d in deliveries] == ["sent", "sent"]               # the first part: skipped
    assert [d["external_id"] is None for d in deliveries] == [True, False]
    mapi.wait_until_idle()
    assert len(number.sent(customer)) == 1


def test_the_same_step_sends_its_text_while_the_window_is_open(mapi, fakes):
    fake = fakes.whatsapp
    number, customer, conversation = started(mapi, fake, "chat_template.bpmn")
    [task] = eventually(lambda: mapi.call("task.list", instance_id=conversation["instance_id"])["items"], bool)
    mapi.call("task.complete", task_id=task["task_id"], result={"order": "B-2", "details": "Soon."})
    [sent] = number.texts(customer, 1)
    assert sent["text"]["body"] == "Your order B-2 is on its way, Ann. Soon."


@pytest.mark.parametrize("template, param", [
    ({"name": "follow_up", "params": [1]}, "template.params[0]"),
    ({"name": "follow_up", "params": ["ok", None]}, "template.params[1]"),
    ({"name": "Follow Up"}, "template.name"),
    ({"name": "follow_up", "language": "English"}, "template.language"),
    ({"name": "follow_up", "header": "x"}, "template.header"),
    ("follow_up", "template"),
])
def test_bad_templates_are_refused_and_nothing_is_sent(mapi, fakes, template, param):
    fake = fakes.whatsapp
    number, customer, conversation = started(mapi, fake, "chat_operator.bpmn")
    with pytest.raises(RpcError) as refused:
        mapi.call("conversation.send", binding_id=conversation["binding_id"], text="x", template=template)
    assert refused.value.reason == "invalid_params"
    assert param in (refused.value.data.get("param") or refused.value.data.get("params", [None])[0] or "")
    mapi.wait_until_idle()
    assert deliveries_of(mapi, number.config_id) == [] and number.sent(customer) == []


def test_a_template_on_another_channel_or_nothing_to_send_is_refused(mapi, fakes):
    bot = Bot(mapi, fakes.telegram, "chat_operator.bpmn")
    chat = 66_000 + int(new_wa_id()) % 10**6
    bot.say(chat, "hi")
    binding = bot.conversation(chat)["binding_id"]
    with pytest.raises(RpcError) as refused:
        mapi.call("conversation.send", binding_id=binding, text="x", template={"name": "follow_up"})
    assert (refused.value.reason, refused.value.data["param"]) == ("invalid_params", "template")
    with pytest.raises(RpcError) as empty:
        mapi.call("conversation.send", binding_id=binding)
    assert (empty.value.reason, empty.value.data["param"]) == ("invalid_params", "text")
    assert conversations_of(mapi, bot.config_id)[0]["binding_id"] == binding


@pytest.mark.parametrize("params, problem", [
    ('[1, "x"]', "value 1 is int"),
    ("not json", "JSON list of strings"),
    ('["{{ 1 + }}"]', "cannot be rendered"),
])
def test_deploy_refuses_template_params_that_are_not_strings(mapi, fakes, params, problem):
    number = Number(mapi, fakes.whatsapp, fixture=None)
    xml = bpmn("chat_template.bpmn").replace("__CHANNEL__", number.channel["name"]).replace(
        """value='["{{ external_username }}", "{{ order }}"]'""", f"value='{params}'")
    with pytest.raises(RpcError) as refused:
        mapi.deploy(xml, code=new_name("tpl"))
    assert refused.value.reason == "invalid_params"
    assert problem in str(refused.value.data) and "template_params" in str(refused.value.data)


def test_deploy_refuses_a_template_language_without_a_template(mapi, fakes):
    number = Number(mapi, fakes.whatsapp, fixture=None)
    xml = bpmn("chat_template.bpmn").replace('<camunda:property name="template" value="order_shipped" />', "")
    with pytest.raises(RpcError) as refused:
        mapi.deploy(xml.replace("__CHANNEL__", number.channel["name"]), code=new_name("tpl"))
    assert "needs a 'template' property" in str(refused.value.data)


def test_a_reply_dead_for_the_closed_window_tells_the_process(mapi, fakes, messenger_server):
    fake = fakes.whatsapp
    number, customer, conversation = started(mapi, fake, "chat_delivery_failed.bpmn")
    number.texts(customer, 1)                                               # the greeting, window open
    age_window(messenger_server, conversation["binding_id"])
    mapi.call("conversation.send", binding_id=conversation["binding_id"], text="Still there?")
    status = eventually(lambda: mapi.call("process.status", instance_id=conversation["instance_id"]),
                        lambda found: "fallback" in found["variables"])
    assert status["variables"]["delivery_reason"] == "window_closed"
    assert status["variables"]["fallback"] == "operator calls: window_closed"
    assert "window is closed" in status["variables"]["delivery_error"]
    assert len(number.sent(customer)) == 1
