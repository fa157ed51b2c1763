"""Console, runs side: an instance waiting on its diagram, the task form (server validation next to
the field), the path after completion, a failed instance retried from its page, and dead
deliveries retried. A real Chromium against a real server."""
from __future__ import annotations

import re
import time

import requests

from tests.browser.conftest import bpmn_file
from tests.receiver import Answer


def marked(page, marker: str) -> set[str]:
    return set(page.eval_on_selector_all(f".djs-element.{marker}", "els => els.map(e => e.dataset.elementId)"))


def test_start_wait_complete_the_form_and_see_the_path(console, tenant_key, api, shots):
    definition_id = api.deploy(bpmn_file("console_order.bpmn"), code="order_review")["definition_id"]
    console.sign_in(tenant_key).go(f"#/definitions/{definition_id}")
    page = console.page
    page.get_by_role("button", name="Start instance…").click()
    page.get_by_label("Variables").fill('{"quantity": 3, "customer": {"name": "Zoë", "tags": ["vip"]}}')
    page.get_by_role("button", name="Start instance", exact=True).click()
    page.wait_for_url(re.compile(r".*#/instances/\d+$"))
    instance_id = int(page.url.rsplit("/", 1)[1])

    # it waits at its user task, on the diagram
    page.locator(".djs-element.baton-waiting[data-element-id='review']").wait_for()
    page.locator(".token", has_text="waiting").wait_for()
    assert {"received", "price"} <= marked(page, "baton-passed")
    page.get_by_text("waits for a person").wait_for()
    shots(page, "instance-waiting", best=True)

    # the instance list says where each one is
    console.go(f"#/instances?definition_id={definition_id}")
    row = page.locator("tbody tr", has=page.get_by_role("link", name=f"#{instance_id}", exact=True))
    row.get_by_text("waits at review").wait_for()
    shots(page, "instances", best=True)

    # the inbox lists the task; its form shows the server's message next to the empty required field
    console.go("#/tasks")
    page.get_by_role("link", name=re.compile("Review the order")).click()
    comment = page.get_by_label("Comment to the customer")
    comment.wait_for()
    task_id = int(page.url.rsplit("/", 1)[1])
    assert page.get_by_label("Refund amount").input_value() == "10"
    assert page.get_by_label("Reason").locator("option").all_inner_texts() == ["— choose —", "Damaged", "Arrived late"]
    page.get_by_role("button", name="Approve").click()
    error = page.locator("#field-comment-error")
    error.wait_for()
    assert error.inner_text() == "Field 'comment' is required."
    assert comment.get_attribute("aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == "field-comment"
    shots(page, "task-form-error", best=True)
    comment.fill("Refund on its way")
    page.get_by_label("Reason").select_option("late")
    page.get_by_label("Urgent").check()
    page.get_by_label("Ship on").fill("2026-12-01")
    page.get_by_role("button", name="Approve").click()
    page.wait_for_url(re.compile(r".*#/tasks$"))
    page.get_by_role("heading", name="Tasks").wait_for()
    page.get_by_text("completed.").wait_for()  # the status line confirms it
    assert page.get_by_role("link", name=re.compile("Review the order")).count() == 0  # gone from the inbox

    # the path after completion: passed elements and flows, only the branch taken
    status = api.wait_for(instance_id)
    assert status["status"] == "completed" and status["variables"]["comment"] == "Refund on its way"
    assert status["variables"]["urgent"] is True and status["variables"]["reason"] == "late"
    console.go(f"#/instances/{instance_id}")
    page.locator(".badge-completed").wait_for()
    page.locator(".djs-element.baton-passed[data-element-id='approved']").wait_for()
    assert marked(page, "baton-passed") >= {"received", "price", "review", "route", "approved"}
    assert "rejected" not in marked(page, "baton-passed")
    flows = marked(page, "baton-flow-taken")
    assert {"f1", "f2", "f3", "to_approved"} <= flows and "to_rejected" not in flows
    history = page.locator("table").last.inner_text()
    assert "Review the order" in history and "completed" in history
    shots(page, "instance-completed", best=True)

    # a task's own address (a bookmark) still opens it, found by task.list's task_id filter
    console.go(f"#/tasks/{task_id}")
    page.get_by_text("This task is completed").wait_for()
    assert "Refund on its way" in page.locator("section.panel").inner_text()
    console.go(f"#/tasks/{task_id + 10_000}")
    page.get_by_text(f"Task {task_id + 10_000} not found.").wait_for()
    console.assert_clean()


def test_a_failed_instance_is_retried_from_its_page(console, tenant_key, api, shots):
    api.deploy(bpmn_file("console_failing.bpmn"), code="split_bill")
    instance_id = api.call("process.start", definition_id="split_bill")["instance_id"]
    assert api.wait_for(instance_id)["status"] == "failed"
    console.sign_in(tenant_key).go(f"#/instances/{instance_id}")
    page = console.page
    page.locator(".djs-element.baton-failed[data-element-id='divide']").wait_for()
    assert "name 'guests' is not defined" in page.locator(".refusal-note").inner_text()
    page.get_by_role("alert").filter(has_text="Failed at Divide by the guests").wait_for()
    shots(page, "instance-failed", best=True)
    page.get_by_role("button", name="Retry…").click()
    page.get_by_label("Variables to merge before retrying").fill('{"guests": 4}')
    page.get_by_role("button", name="Retry", exact=True).click()
    page.locator(".badge-completed").wait_for()  # the page refreshes itself while it runs
    status = api.call("process.status", instance_id=instance_id)
    assert status["status"] == "completed" and status["variables"]["share"] == 25
    assert "divide" in marked(page, "baton-passed") and not marked(page, "baton-failed")
    console.assert_clean()


def test_dead_deliveries_are_listed_with_their_error_and_retried(console, console_server, tenant_key, api, receiver, shots):
    receiver.default = Answer(503, {"busy": True})
    channel = api.call("channel.create", type="webchat", name=f"dead-{int(time.time() * 1000)}", webhook_url=receiver.url)
    api.deploy(bpmn_file("console_chat.bpmn", channel=channel["name"], task_name="Answer"), code="dead_letters")
    chat_key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    inbound = requests.post(f"{console_server.base_url}/channels/webchat/{channel['config_id']}/inbound",
                            json={"chat_id": "c-dead", "text": "hello"}, headers={"X-API-Key": chat_key}, timeout=10)
    assert inbound.status_code == 202
    binding_id = inbound.json()["binding_id"]
    api.call("conversation.send", binding_id=binding_id, text="We are on it")
    deadline = time.monotonic() + 30
    while not (dead := [d for d in api.call("delivery.list", status="dead")["items"] if d["url"] == receiver.url]):
        assert time.monotonic() < deadline, "the delivery never died"
        time.sleep(0.2)
    console.sign_in(tenant_key).go("#/deliveries")
    page = console.page
    row = page.locator("tbody tr").filter(has=page.get_by_role("cell", name=str(dead[0]["delivery_id"]), exact=True))
    row.wait_for()
    assert "503" in row.inner_text()
    shots(page, "deliveries-dead", best=True)
    console.go("#/")
    dead_card = page.locator("section.card", has_text="Dead deliveries")
    dead_card.locator(".big a").wait_for()
    assert int(dead_card.locator(".big a").inner_text()) >= 1
    assert "null" not in dead_card.inner_text()  # a part the card leaves out is not written as text
    page.locator("section.panel", has_text="Instances by definition").locator("table").wait_for()
    shots(page, "dashboard", best=True)
    console.go("#/deliveries")
    receiver.default = Answer(200, {"ok": True})
    row.get_by_role("button", name="Retry now").click()
    page.get_by_text(f"Delivery {dead[0]['delivery_id']} queued again.").wait_for()
    deadline = time.monotonic() + 20
    while dead[0]["delivery_id"] not in [d["delivery_id"] for d in api.call("delivery.list", status="sent")["items"]]:
        assert time.monotonic() < deadline, "the retried delivery was never sent"
        time.sleep(0.1)
    assert receiver.requests[-1].json()["text"] == "We are on it"
    console.assert_clean()
