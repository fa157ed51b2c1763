"""Console, day-2 operations (issue 26): an instance's history as a timeline (the incident in red
with its message beside the repairs that followed, each with who and when), the "Edit variables"
dialog, Skip and Rewind picked on the diagram with a confirmation naming what they cancel, and a
cancelled instance whose open step no longer shows as waiting. A real Chromium against a real server."""
from __future__ import annotations

from tests.browser.conftest import bpmn_file


def timeline(page) -> list[tuple[str, str]]:
    return page.eval_on_selector_all(".timeline li", "els => els.map(e => [e.dataset.kind, e.innerText])")


def test_the_timeline_keeps_the_incident_beside_the_variables_edit_and_the_retry(console, tenant_key, api, shots):
    api.deploy(bpmn_file("console_failing.bpmn"), code="split_bill_history")
    instance_id = api.call("process.start", definition_id="split_bill_history", variables={"total": 100})["instance_id"]
    assert api.wait_for(instance_id)["status"] == "failed"
    console.sign_in(tenant_key).go(f"#/instances/{instance_id}")
    page = console.page
    page.locator(".timeline li.incident").wait_for()
    assert "name 'guests' is not defined" in page.locator(".timeline li.incident").inner_text()

    page.get_by_role("button", name="Edit variables…").click()
    editor = page.get_by_role("dialog").get_by_label("Variables", exact=True)
    assert '"total": 100' in editor.input_value()
    editor.fill('{"total": 120, "guests": 4}')
    shots(page, "instance-edit-variables", best=True)
    page.get_by_role("button", name="Save variables").click()
    page.locator(".timeline li[data-kind='variables_set']").wait_for()
    assert api.call("process.status", instance_id=instance_id)["variables"] == {"total": 120, "guests": 4}
    assert "set guests, total" in page.locator(".timeline li[data-kind='variables_set']").inner_text()

    page.get_by_role("button", name="Retry…").click()
    page.get_by_role("button", name="Retry", exact=True).click()
    page.locator(".badge-completed").wait_for()
    page.locator(".timeline li[data-kind='completed']").wait_for()
    events = timeline(page)
    assert [kind for kind, _ in events] == ["started", "failed", "variables_set", "retried", "completed"]
    key_name = api.call("auth.whoami")["name"]
    assert all(f"by API key “{key_name}”" in text for kind, text in events if kind in ("variables_set", "retried"))
    assert "by Baton" in events[1][1] and "Divide by the guests" in events[1][1]
    page.locator("section[aria-label='History']").scroll_into_view_if_needed()
    shots(page, "instance-history", best=True)
    console.assert_clean()


def test_rewind_and_skip_are_picked_on_the_diagram_and_confirmed_with_what_they_cancel(console, tenant_key, api, shots):
    api.deploy(bpmn_file("console_order.bpmn"), code="order_repair")
    instance_id = api.call("process.start", definition_id="order_repair", variables={"quantity": 3})["instance_id"]
    console.sign_in(tenant_key).go(f"#/instances/{instance_id}")
    page = console.page
    page.locator(".djs-element.baton-waiting[data-element-id='review']").wait_for()
    [task] = api.call("task.list", instance_id=instance_id)["items"]

    # Rewind to the script it passed: the open review is named as what it cancels.
    page.locator(".djs-element[data-element-id='price']").click()
    rewind = page.get_by_role("button", name="Rewind here…")
    assert rewind.is_enabled() and page.get_by_role("button", name="Skip…").is_disabled()
    rewind.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("This cancels:").wait_for()
    assert "Review the order" in dialog.locator(".cancel-list").inner_text()
    shots(page, "instance-rewind-confirm", best=True)
    dialog.get_by_role("button", name="Rewind", exact=True).click()
    page.locator(".timeline li[data-kind='rewound']").wait_for()
    assert "cancelled Review the order" in page.locator(".timeline li[data-kind='rewound']").inner_text()
    rows = {t["task_id"]: t["status"] for t in api.call("task.list", instance_id=instance_id)["items"]}
    assert rows[task["task_id"]] == "cancelled"

    # Skip the review it waits at again, with the decision the gateway after it reads.
    page.locator(".djs-element.baton-waiting[data-element-id='review']").wait_for()
    page.locator(".djs-element[data-element-id='review']").click()
    page.get_by_role("button", name="Skip…").click()
    dialog = page.get_by_role("dialog")
    assert "Review the order" in dialog.locator(".cancel-list").inner_text()
    dialog.get_by_label("Variables to merge in").fill('{"decision": "approve"}')
    shots(page, "instance-skip-confirm", best=True)
    dialog.get_by_role("button", name="Skip", exact=True).click()
    page.locator(".badge-completed").wait_for()
    status = api.call("process.status", instance_id=instance_id)
    assert status["status"] == "completed" and status["variables"]["decision"] == "approve"
    # The review before the rewind (a new one opened after it: the rewind went back past it), then the skipped one.
    assert [t["status"] for t in api.call("task.list", instance_id=instance_id)["items"]] == ["cancelled", "cancelled"]
    page.locator(".timeline li[data-kind='skipped']").wait_for()
    assert [kind for kind, _ in timeline(page)] == ["started", "rewound", "skipped", "completed"]
    page.locator("section[aria-label='History']").scroll_into_view_if_needed()
    shots(page, "instance-repaired", best=True)
    console.assert_clean()


def test_a_cancelled_instance_shows_no_step_as_waiting(console, tenant_key, api, shots):
    api.deploy(bpmn_file("console_order.bpmn"), code="order_cancelled")
    instance_id = api.call("process.start", definition_id="order_cancelled", variables={"quantity": 1})["instance_id"]
    api.wait_for(instance_id, statuses=("running",))
    while not api.call("task.list", instance_id=instance_id)["items"]:
        pass
    api.call("process.cancel", instance_id=instance_id)
    console.sign_in(tenant_key).go(f"#/instances/{instance_id}")
    page = console.page
    page.locator(".badge-cancelled").wait_for()
    page.locator(".step-cancelled").first.wait_for()
    assert page.locator(".step-waiting").count() == 0 and page.locator(".token").count() == 0
    assert not page.locator(".djs-element.baton-waiting").count()
    assert page.get_by_role("button", name="Edit variables…").count() == 0  # an ended instance is not repaired
    assert [kind for kind, _ in timeline(page)] == ["started", "cancelled"]
    shots(page, "instance-cancelled")
    console.assert_clean()


def test_the_history_and_the_repair_controls_fit_a_phone(phone, tenant_key, api, shots):
    api.deploy(bpmn_file("console_failing.bpmn"), code="split_bill_phone")
    instance_id = api.call("process.start", definition_id="split_bill_phone")["instance_id"]
    assert api.wait_for(instance_id)["status"] == "failed"
    phone.sign_in(tenant_key).go(f"#/instances/{instance_id}")
    page = phone.page
    page.locator(".timeline li.incident").wait_for()
    page.get_by_label("Repair at an element").select_option("divide")
    assert page.get_by_role("button", name="Skip…").is_enabled()
    assert page.get_by_role("button", name="Rewind here…").is_disabled()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing overflows sideways
    page.locator("section[aria-label='History']").scroll_into_view_if_needed()
    shots(page, "instance-history-phone", best=True)
    phone.assert_clean()
