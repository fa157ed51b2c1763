"""Console, people side: an operator's reply in a conversation reaches the channel's webhook, new
messages appear without reload, the inbox works on a 390-pixel phone, and data (chat text, a
variable, a BPMN element name) is shown as text with no script run."""
from __future__ import annotations

import time
import uuid
from xml.sax.saxutils import escape

import requests

from tests.browser.conftest import bpmn_file

PROBE = "<img src=x onerror=window.__xss=1>"


def open_chat(console_server, api, receiver, task_name: str, text: str, username: str = "Zoë"):
    """A webchat channel posting to `receiver`, a process bound to it, and a customer's first message."""
    channel = api.call("channel.create", type="webchat", name=f"site-{uuid.uuid4().hex[:6]}", webhook_url=receiver.url)
    api.deploy(bpmn_file("console_chat.bpmn", channel=channel["name"], task_name=escape(task_name)),
               code=f"chat_{uuid.uuid4().hex[:6]}")
    chat_key = api.call("apikey.create", name="site backend", permissions=["conversation.send"])["api_key"]

    def customer_says(words: str):
        answer = requests.post(f"{console_server.base_url}/channels/webchat/{channel['config_id']}/inbound",
                               json={"chat_id": "c-17", "text": words, "username": username},
                               headers={"X-API-Key": chat_key}, timeout=10)
        assert answer.status_code == 202, answer.text
        return answer.json()

    first = customer_says(text)
    return first, customer_says


def test_operator_reply_reaches_the_webhook_and_new_messages_appear_on_a_phone(
        phone, console_server, tenant_key, api, receiver, shots):
    first, customer_says = open_chat(console_server, api, receiver, "Answer the customer", "Where is my parcel?")
    phone.sign_in(tenant_key).go("#/conversations")
    page = phone.page
    page.get_by_role("link", name="Zoë").first.click()
    page.get_by_text("Where is my parcel?").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing overflows sideways
    assert not page.get_by_text("Ctrl+Enter sends.").is_visible()  # no keyboard on a phone: no shortcut hint
    page.get_by_label("Reply to the customer").fill("It leaves the warehouse today.")
    page.get_by_role("button", name="Send").click()
    deadline = time.monotonic() + 15
    while not any(r.json().get("text") == "It leaves the warehouse today." for r in receiver.requests):
        assert time.monotonic() < deadline, "the operator's reply never reached the webhook"
        time.sleep(0.1)
    posted = next(r.json() for r in receiver.requests if r.json().get("text") == "It leaves the warehouse today.")
    assert posted["chat_id"] == "c-17"
    page.locator(".msg-operator", has_text="It leaves the warehouse today.").wait_for()
    customer_says("Thank you!")  # arrives while the page is open: no reload
    page.locator(".msg-customer", has_text="Thank you!").wait_for(timeout=10_000)
    assert page.locator(".msg-customer .msg-author").first.inner_text() == "Customer"
    shots(page, "conversation-phone", best=True)

    phone.go("#/tasks")
    page.get_by_text("Answer the customer").first.click()
    page.get_by_role("button", name="Complete task").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shots(page, "task-phone", best=True)
    phone.go("#/tasks")
    page.get_by_role("heading", name="Tasks").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shots(page, "inbox-phone", best=True)
    phone.assert_clean()


def test_an_xss_probe_in_chat_text_variables_and_element_names_stays_text(
        console, console_server, tenant_key, api, receiver, shots):
    first, customer_says = open_chat(console_server, api, receiver, PROBE, PROBE, username=PROBE)
    instance_id = first["instance_id"]
    console.sign_in(tenant_key)
    page = console.page

    console.go(f"#/conversations/{first['binding_id']}")
    page.locator(".msg-customer .msg-text", has_text=PROBE).wait_for()
    assert page.get_by_text("Ctrl+Enter sends.").is_visible()  # a desktop with a keyboard gets the hint

    console.go(f"#/instances/{instance_id}")  # the element name on the diagram and in the text
    page.locator(".djs-element.baton-waiting[data-element-id='answer']").wait_for()
    assert page.locator(".djs-element[data-element-id='answer'] text").text_content() == PROBE
    page.locator(".tree-value", has_text=PROBE).first.wait_for()  # message_text, a variable

    started = api.call("process.start", definition_id=api.call("process.status", instance_id=instance_id)["definition_id"],
                       variables={PROBE: {"note": PROBE}})["instance_id"]
    console.go(f"#/instances/{started}")
    page.locator(".tree-key", has_text=PROBE).first.wait_for()  # a variable's name, too

    console.go("#/tasks")
    page.locator(".inbox-title", has_text=PROBE).first.wait_for()
    shots(page, "xss-probe-as-text")
    assert page.locator("img[src='x']").count() == 0
    console.assert_clean()  # no CSP violation (nothing tried to run) and window.__xss unset


def test_a_conversations_hand_overs_show_in_its_instances_timeline(console, console_server, tenant_key, api, receiver,
                                                                    shots):
    first, _customer_says = open_chat(console_server, api, receiver, "Answer the customer", "Is anyone there?")
    api.call("conversation.assign", binding_id=first["binding_id"], user="fay")
    api.call("conversation.assign", binding_id=first["binding_id"], user=None)
    console.sign_in(tenant_key).go(f"#/instances/{first['instance_id']}")
    page = console.page
    page.locator(".timeline li[data-kind='conversation_assigned']").nth(1).wait_for()
    assigned = page.locator(".timeline li[data-kind='conversation_assigned']").all_inner_texts()
    assert any(f"conversation #{first['binding_id']} to fay" in text for text in assigned), assigned
    assert any(f"conversation #{first['binding_id']} to nobody" in text for text in assigned), assigned
    page.locator("section[aria-label='History']").scroll_into_view_if_needed()
    shots(page, "instance-history-conversation")
    console.assert_clean()
