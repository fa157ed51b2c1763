"""Console, operator work: the inbox (My tasks / My groups / Unassigned / All) with claim and hand-over,
a Camunda Form drawn by form-js with a validation error next to its field, a conversation claimed
from the inbox, a diagram laid out for a file without one, tables on a phone, and the rough edges
a look in Chromium found (failing deliveries, bulk retry, confirmations, channel URLs, names for a
key without admin, time zones). A real Chromium against a real server."""
from __future__ import annotations

import re
import time
import uuid

import requests

from tests.browser.conftest import bpmn_file
from tests.harness import bpmn


def operator_key(api, user, groups=(), permissions=("task.*", "process.status", "process.list",
                                                     "conversation.*")) -> str:
    params = {"name": f"{user}'s key", "permissions": list(permissions), "user": user}
    if groups:
        params["groups"] = list(groups)
    return api.call("apikey.create", **params)["api_key"]


def open_tasks(api, instance_id, timeout=15.0, count=1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = api.call("task.list", instance_id=instance_id, status="in_progress")["items"]
        if len(items) >= count:
            return items
        time.sleep(0.05)
    raise AssertionError(f"no open task for instance {instance_id}")


def test_the_inbox_shows_my_and_my_groups_tasks_with_due_dates_and_a_claim_moves_a_task(
        console, api, shots):
    code, team = f"review_{uuid.uuid4().hex[:6]}", f"north{uuid.uuid4().hex[:4]}"
    api.deploy(bpmn("assigned_review.bpmn"), code=code)
    ann = f"ann{uuid.uuid4().hex[:4]}"
    key = operator_key(api, ann, [f"team-{team}"])
    late = api.call("process.start", definition_id=code, variables={"region": team, "due": "2020-02-01T09:00:00Z",
                                                                     "urgency": 90})["instance_id"]
    mine = api.call("process.start", definition_id=code, variables={"region": team, "requester": ann})["instance_id"]
    late_task, mine_task = open_tasks(api, late)[0], open_tasks(api, mine)[0]
    console.sign_in(key).go("#/tasks")
    page = console.page
    page.get_by_role("link", name="My tasks").wait_for()
    assert page.locator(".tabs a[aria-current='page']").inner_text() == "My tasks"
    rows = page.locator("ul.inbox > li")
    rows.first.wait_for()
    assert rows.count() == 2
    late_row = page.locator("li.inbox-row", has=page.locator(f"a[href='#/tasks/{late_task['task_id']}']"))
    assert "overdue" in late_row.inner_text() and "priority 90" in late_row.inner_text()
    assert f"held by {ann}" in page.locator("li.inbox-row", has=page.locator(
        f"a[href='#/tasks/{mine_task['task_id']}']")).inner_text()
    shots(page, "tasks-inbox", best=True)

    # My groups: only the group's unheld task; claiming it from the list makes it mine
    page.get_by_role("link", name="My groups").click()
    page.locator(".tabs a[aria-current='page']", has_text="My groups").wait_for()
    page.locator("ul.inbox > li").first.wait_for()
    assert page.locator("ul.inbox > li").count() == 1
    late_row.get_by_role("button", name=re.compile("Claim")).click()
    page.get_by_text("is yours now").wait_for()
    page.get_by_text(f"No open task waits for the group team-{team}.").wait_for()
    assert api.call("task.list", task_id=late_task["task_id"])["items"][0]["assignee"] == ann

    # The task page: who holds it, when it is due; release gives it back to the group
    console.go(f"#/tasks/{late_task['task_id']}")
    page.get_by_role("button", name="Release").wait_for()
    facts = page.locator("dl.facts").inner_text()
    assert f"{ann} (you)" in facts and "2020-02-01" in facts and re.search(r"2020-02-01 \d\d:\d\d:\d\d \S+", facts)
    shots(page, "task-held")
    page.get_by_role("button", name="Release").click()
    page.get_by_text("back with its candidates").wait_for()
    page.get_by_role("button", name="Claim").wait_for()
    assert api.call("task.list", task_id=late_task["task_id"])["items"][0]["assignee"] is None
    console.assert_clean()


def task_page(console, api, key, xml: str, variables: dict | None = None):
    """(page, task, instance id): ``xml`` deployed under a code of its own and started, its first open
    task's page shown to ``key``."""
    code = f"task_page_{uuid.uuid4().hex[:6]}"
    api.deploy(xml, code=code)
    instance_id = api.call("process.start", definition_id=code, variables=variables or {})["instance_id"]
    task = open_tasks(api, instance_id)[0]
    console.sign_in(key).go(f"#/tasks/{task['task_id']}")
    return console.page, task, instance_id


def test_an_admin_hands_a_task_over(console, api, tenant_key):
    page, task, _ = task_page(console, api, tenant_key, bpmn("assigned_review.bpmn"), {"region": "x"})
    page.get_by_role("button", name="Hand over…").click()
    page.get_by_label("To the user").fill("bea")
    page.get_by_role("button", name="Hand over", exact=True).click()
    page.get_by_text("The task is with bea now.").wait_for()
    page.locator("dl.facts", has_text="bea").wait_for()
    assert api.call("task.list", task_id=task["task_id"])["items"][0]["assignee"] == "bea"
    console.assert_clean()


def test_a_task_escalates_and_ends_with_a_bpmn_error_from_its_page(console, api, tenant_key, shots):
    page, task, instance_id = task_page(console, api, tenant_key, bpmn_file("console_invoice.bpmn"))

    # Escalated beside the task (non-interrupting): the check opens, the task stays open.
    assert not page.get_by_role("button", name="Escalate…").is_visible()     # folded under the form
    page.get_by_text("Instead of completing…").click()
    shots(page, "task-instead-of-completing")
    page.get_by_role("button", name="Escalate…").click()
    page.get_by_label("Escalation code").fill("invoice-escalate")
    page.get_by_role("button", name="Escalate", exact=True).click()
    page.get_by_text("Escalation 'invoice-escalate' raised at “Pay the invoice”.").wait_for()
    assert sorted(t["element_id"] for t in open_tasks(api, instance_id, count=2)) == ["check", "pay"]

    # A code no boundary catches is refused in the dialog, and nothing changes.
    page.get_by_text("Instead of completing…").click()    # the view was drawn again after the escalation
    page.get_by_role("button", name="Report a BPMN error…").click()
    page.get_by_label("Error code").fill("typo")
    page.get_by_role("button", name="End with this error").click()
    page.locator(".dialog-problem", has_text="has no error boundary event that catches 'typo'").wait_for()
    shots(page, "task-bpmn-error-refused")
    page.get_by_label("Error code").fill("invoice-error")
    page.get_by_label("Message").fill("the scan is blank")
    page.get_by_role("button", name="End with this error").click()
    page.get_by_text("Task “Pay the invoice” ended with the error 'invoice-error'.").wait_for()
    ended = api.call("task.list", task_id=task["task_id"])["items"][0]
    assert ended["status"] == "cancelled" and ended["result"] == {"bpmn_error": "invoice-error",
                                                                  "message": "the scan is blank"}
    assert sorted(t["element_id"] for t in open_tasks(api, instance_id, count=2)) == ["ask", "check"]
    console.assert_clean()


def test_a_camunda_form_is_drawn_by_form_js_with_the_error_next_to_its_field(console, api, shots):
    code = f"invoice_{uuid.uuid4().hex[:6]}"
    api.call("definition.deploy", bpmn=bpmn("invoice_form.bpmn"), code=code, forms=[bpmn("invoice.form")])
    instance_id = api.call("process.start", definition_id=code)["instance_id"]
    task = open_tasks(api, instance_id)[0]
    key = operator_key(api, f"cleo{uuid.uuid4().hex[:4]}")
    console.sign_in(key).go(f"#/tasks/{task['task_id']}")
    page = console.page
    customer = page.get_by_label("Customer")
    customer.wait_for()
    assert page.locator(".fjs-container").count() == 1  # form-js drew it
    page.get_by_label("Amount").fill("5000")
    page.get_by_role("button", name="Complete task").click()
    # form-js's own messages, each under its field
    customer_field = page.locator(".fjs-form-field", has=page.locator("label", has_text="Customer"))
    customer_field.locator(".fjs-form-field-error").wait_for()
    assert "required" in customer_field.locator(".fjs-form-field-error").inner_text().lower()
    amount_field = page.locator(".fjs-form-field", has=page.locator("label", has_text="Amount"))
    assert "1000" in amount_field.locator(".fjs-form-field-error").inner_text()
    shots(page, "task-camunda-form-error", best=True)
    assert api.call("task.list", task_id=task["task_id"])["items"][0]["status"] == "in_progress"  # nothing sent

    customer.fill("ACME Ltd")
    page.get_by_label("Amount").fill("120")
    page.get_by_label("City").fill("Lyon")
    page.get_by_label("E-mail").check()
    page.get_by_label("Paid on").click()  # form-js's date picker (flatpickr) opens under the CSP
    page.locator(".flatpickr-calendar.open").wait_for()
    page.keyboard.type("11/20/2026")
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Complete task").click()
    page.wait_for_url(re.compile(r".*#/tasks$"))
    page.get_by_text("completed.").wait_for()
    status = api.wait_for(instance_id)
    assert status["variables"]["customer"] == "ACME Ltd" and status["variables"]["amount"] == 120
    assert status["variables"]["currency"] == "EUR" and status["variables"]["address"] == {"city": "Lyon"}
    assert status["variables"]["paid_on"] == "2026-11-20"
    console.assert_clean()


def test_the_server_refusal_of_a_field_is_shown_next_to_it_in_the_form(console, api):
    """A check only the server can make (the options in the task's variables) lands next to its field."""
    form = bpmn("invoice.form").replace('"id": "invoice"', '"id": "picky"')
    code = f"picky_{uuid.uuid4().hex[:6]}"
    xml = bpmn("invoice_form.bpmn").replace('camunda:formRef="invoice"', 'camunda:formRef="picky"')
    api.call("definition.deploy", bpmn=xml, code=code, forms=[form])
    task = open_tasks(api, api.call("process.start", definition_id=code)["instance_id"])[0]
    console.sign_in(operator_key(api, f"dan{uuid.uuid4().hex[:4]}")).go(f"#/tasks/{task['task_id']}")
    page = console.page
    page.get_by_label("Customer").fill("ACME")
    page.get_by_label("Amount").fill("12")
    page.get_by_label("City").fill("Oslo")
    page.get_by_label("Note").fill("x" * 20)
    page.evaluate("() => { window.__realFetch = window.fetch; window.fetch = (url, init) => {"
                  " const body = JSON.parse(init.body); if (body.method === 'task.complete') {"
                  " body.params.result.note = 'y'.repeat(201); init = { ...init, body: JSON.stringify(body) }; }"
                  " return window.__realFetch(url, init); }; }")
    page.get_by_role("button", name="Complete task").click()
    note_field = page.locator(".fjs-form-field", has=page.locator("label", has_text="Note"))
    note_field.locator(".fjs-form-field-error", has_text="at most 200 characters").wait_for()
    assert api.call("task.list", task_id=task["task_id"])["items"][0]["status"] == "in_progress"
    console.assert_clean()


def test_a_file_without_diagram_layout_is_laid_out_and_says_so(console, api, tenant_key, shots):
    definition_id = api.deploy(bpmn("lane_approval.bpmn").replace("lane_approval", "no_layout"),
                               code=f"nolayout_{uuid.uuid4().hex[:6]}")["definition_id"]
    console.sign_in(tenant_key).go(f"#/definitions/{definition_id}")
    page = console.page
    page.get_by_text("the console laid it out").wait_for()
    for element_id in ("start", "approve", "answer", "end", "f1", "f2", "f3"):
        page.locator(f".djs-element[data-element-id='{element_id}']").first.wait_for(state="attached")
    assert page.locator(".djs-element[data-element-id='approve'] text").text_content() == "Approve the refund"
    assert "cannot be drawn" not in page.locator("main").inner_text()
    shots(page, "definition-generated-layout", best=True)
    console.assert_clean()


def test_tables_on_a_phone_are_cards_with_nothing_cut_off(phone, api, tenant_key, shots):
    code = f"phone_{uuid.uuid4().hex[:6]}"
    api.deploy(bpmn("wait_for_person.bpmn"), code=code)
    for _ in range(2):
        api.call("process.start", definition_id=code)
    phone.sign_in(tenant_key)
    page = phone.page
    for hash_, shot in (("#/instances", "instances-phone"), ("#/definitions", "definitions-phone")):
        phone.go(hash_)
        page.locator("table.cards-on-phone tbody tr").first.wait_for()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        for table in page.locator("table.cards-on-phone").all():
            assert table.evaluate("t => t.scrollWidth <= t.parentElement.clientWidth + 1")
        cell = page.locator("table.cards-on-phone tbody tr td[data-label]").nth(1)
        label = cell.evaluate("td => getComputedStyle(td, '::before').content")
        assert label.strip('"') == cell.get_attribute("data-label") and label.strip('"')
        assert page.locator("table.cards-on-phone thead").first.bounding_box()["height"] <= 1  # names sit in the cards
        shots(page, shot, best=True)
    phone.assert_clean()


def test_a_conversation_is_claimed_from_the_inbox(console, console_server, api, receiver, shots):
    channel = api.call("channel.create", type="webchat", name=f"site-{uuid.uuid4().hex[:6]}", webhook_url=receiver.url)
    api.deploy(bpmn_file("console_chat.bpmn", channel=channel["name"], task_name="Answer"),
               code=f"chat_{uuid.uuid4().hex[:6]}")
    site = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    who = f"Yuki{uuid.uuid4().hex[:4]}"
    answer = requests.post(f"{console_server.base_url}/channels/webchat/{channel['config_id']}/inbound",
                           json={"chat_id": who, "text": "Hello?", "username": who},
                           headers={"X-API-Key": site}, timeout=10)
    assert answer.status_code == 202
    binding_id = answer.json()["binding_id"]
    operator = f"eli{uuid.uuid4().hex[:4]}"
    console.sign_in(operator_key(api, operator)).go("#/conversations?view=unassigned")
    page = console.page
    row = page.locator("li.inbox-row", has_text=who)
    row.get_by_role("button", name=re.compile("Claim")).click()
    page.get_by_text("You answer this customer now.").wait_for()
    page.get_by_role("link", name="Mine").click()
    page.locator("li.inbox-row", has_text=who).get_by_text(f"held by {operator}").wait_for()
    shots(page, "conversations-inbox", best=True)
    page.locator("li.inbox-row", has_text=who).get_by_role("link").click()
    page.get_by_text("You answer this customer").wait_for()
    assert [c for c in api.call("conversation.list", assignee=operator)["items"]][0]["binding_id"] == binding_id
    console.assert_clean()


def test_the_web_chat_channel_shows_its_inbound_url_and_the_processes_it_starts(console, api, tenant_key, receiver):
    channel = api.call("channel.create", type="webchat", name=f"site-{uuid.uuid4().hex[:6]}", webhook_url=receiver.url)
    code = f"chat_{uuid.uuid4().hex[:6]}"
    api.deploy(bpmn_file("console_chat.bpmn", channel=channel["name"], task_name="Answer"), code=code)
    console.sign_in(tenant_key).go("#/channels")
    page = console.page
    row = page.locator("tbody tr", has_text=channel["name"])
    row.get_by_text(f"/channels/webchat/{channel['config_id']}/inbound").wait_for()
    assert f"{code} v1" in row.inner_text()
    console.assert_clean()


def test_failing_deliveries_are_not_called_all_sent(console, console_server, api, tenant_key, receiver, shots):
    from tests.receiver import Answer

    receiver.default = Answer(503)  # fails every time (this server gives up within seconds)
    channel = api.call("channel.create", type="webchat", name=f"site-{uuid.uuid4().hex[:6]}", webhook_url=receiver.url)
    api.deploy(bpmn_file("console_chat.bpmn", channel=channel["name"], task_name="Answer"),
               code=f"chat_{uuid.uuid4().hex[:6]}")
    site = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    binding_id = requests.post(f"{console_server.base_url}/channels/webchat/{channel['config_id']}/inbound",
                               json={"chat_id": "f-1", "text": "hi"}, headers={"X-API-Key": site},
                               timeout=10).json()["binding_id"]
    api.call("conversation.send", binding_id=binding_id, text="This one will fail")

    def ours():
        return [d for d in api.call("delivery.list", per_page=100)["items"]
                if d["url"] == receiver.url and (d["status"] == "dead" or d["attempts"] > 0)]

    deadline = time.monotonic() + 15
    while not ours():
        assert time.monotonic() < deadline, "the delivery was never tried"
        time.sleep(0.1)
    console.sign_in(tenant_key)
    page = console.page
    card = page.locator(".card", has_text="Dead deliveries")
    card.wait_for()
    assert "Every message went out" not in card.inner_text()
    shots(page, "dashboard-failing-delivery")
    console.go("#/deliveries")
    page.get_by_role("heading", name="Deliveries").wait_for()
    page.locator("main table, main p.empty").first.wait_for()
    assert "every message went out" not in page.locator("main").inner_text()
    shots(page, "deliveries-failing-delivery")
    console.assert_clean()


def test_bulk_retry_passes_variables_and_reports_an_instance_that_fails_again(console, api, tenant_key, shots):
    code = f"failing_{uuid.uuid4().hex[:6]}"
    api.deploy(bpmn_file("console_failing.bpmn"), code=code)
    first = api.call("process.start", definition_id=code)["instance_id"]
    second = api.call("process.start", definition_id=code)["instance_id"]
    for instance_id in (first, second):
        api.wait_for(instance_id, statuses=("failed",))
    console.sign_in(tenant_key).go(f"#/instances?status=failed&definition_id={api.call('process.status', instance_id=first)['definition_id']}")
    page = console.page
    page.get_by_label(f"Select instance {first}").check()
    page.get_by_role("button", name="Retry selected").click()
    page.get_by_role("button", name="Retry 1 instance").click()  # no variables: it fails again at once
    page.get_by_text("failed again").wait_for()
    assert "0 resumed" in page.locator("#status").inner_text()
    page.get_by_label(f"Select instance {second}").check()
    page.get_by_role("button", name="Retry selected").click()
    page.get_by_label("Variables to set first (optional)").fill('{"guests": 4}')
    page.get_by_role("button", name="Retry 1 instance").click()
    page.get_by_text("1 resumed").wait_for()
    assert api.call("process.status", instance_id=second)["status"] != "failed"
    # the confirmation does not follow the operator to the next page
    console.go("#/tasks")
    page.get_by_role("heading", name="Tasks").wait_for()
    assert page.locator("#status").inner_text() == ""
    console.assert_clean()
