"""Console: the definition page's "Migrate instances to version N": the dry run's answer first (what
would move, what would be refused and why), then the move. A real Chromium against a real server."""
from __future__ import annotations

import uuid

from tests.integration.test_migration import chain, process
from tests.integration.test_webchat import eventually

V1 = chain('<bpmn:startEvent id="start" name="Ticket in" />', '<bpmn:userTask id="review" name="Review the ticket" />',
           '<bpmn:userTask id="approve" name="Approve the refund" />', '<bpmn:endEvent id="end" name="Done" />')
V2 = chain('<bpmn:startEvent id="start" name="Ticket in" />', '<bpmn:userTask id="review" name="Review the ticket" />',
           '<bpmn:userTask id="survey" name="Ask for feedback" />', '<bpmn:endEvent id="end" name="Done" />')


def open_task(api, instance_id: int) -> dict:
    [task] = eventually(lambda: api.call("task.list", instance_id=instance_id, status="in_progress")["items"], bool)
    return task


def test_migrate_a_versions_instances_after_the_dry_run(console, tenant_key, api, shots):
    code = f"refunds_{uuid.uuid4().hex[:6]}"
    v1 = api.deploy(process(code, V1), code=code)
    ids = [api.call("process.start", definition_id=v1["definition_id"], variables={"n": n})["instance_id"]
           for n in range(4)]
    tasks = {instance_id: open_task(api, instance_id) for instance_id in ids}
    past_review = ids[0]  # this one waits at "approve", which v2 no longer has: it must be refused
    api.call("task.complete", task_id=tasks[past_review]["task_id"], result={})
    eventually(lambda: open_task(api, past_review)["element_id"], lambda element: element == "approve")
    assert api.deploy(process(code, V2), code=code)["version"] == 2

    console.sign_in(tenant_key).go(f"#/definitions/{v1['definition_id']}")
    page = console.page
    button = page.get_by_role("button", name="Migrate instances to version 2…")
    button.click()
    dialog = page.get_by_role("dialog", name="Migrate instances to version 2")
    dialog.wait_for()
    text = dialog.inner_text()
    assert "4 running instances of" in text and "3 would move" in text and "1 would be refused" in text
    assert "Added: survey" in text and "Removed: approve" in text
    refused_row = dialog.locator("tbody tr")
    assert refused_row.count() == 1
    assert f"#{past_review}" in refused_row.inner_text() and "'approve'" in refused_row.inner_text()
    assert all(api.call("process.status", instance_id=i)["version"] == 1 for i in ids)  # a dry run only
    shots(page, "definition-migrate-dry-run", best=True)

    ended = ids[1]  # ends between the dry run and the move: the server refuses a call naming it
    api.call("process.cancel", instance_id=ended)
    dialog.get_by_role("button", name="Migrate 3 instances to v2").click()
    page.get_by_text(f"Migrated 2 instances to {code} v2; 1 ended meanwhile.").wait_for()
    versions = {i: api.call("process.status", instance_id=i)["version"] for i in ids}
    assert versions == {past_review: 1, ended: 1, **{i: 2 for i in ids[2:]}}
    assert all(open_task(api, i)["task_id"] == tasks[i]["task_id"] for i in ids[2:])
    console.assert_clean()
