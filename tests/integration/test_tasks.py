"""task.list and task.complete over real HTTP, on SQLite and PostgreSQL."""
from __future__ import annotations

import concurrent.futures
import time

import pytest

from tests.harness import RpcError, bpmn


def open_task(api, instance_id, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = api.call("task.list", instance_id=instance_id, status="in_progress")["items"]
        if items:
            return items[0]
        time.sleep(0.02)
    raise AssertionError(f"no open task for instance {instance_id}")


@pytest.fixture
def approval(api, unique_code):
    api.deploy(bpmn("approval_form.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code,
                           variables={"customer": "Zoë", "order": 17})["instance_id"]
    return instance_id, open_task(api, instance_id)


def test_ready_user_task_is_listed_with_form_buttons_and_variables(approval):
    instance_id, task = approval
    assert task["instance_id"] == instance_id and task["status"] == "in_progress"
    assert task["element_id"] == "approve" and task["name"] == "Approve the refund"
    assert task["buttons"] == ["approve", "reject"]
    assert task["variables"] == {"customer": "Zoë", "order": 17}
    assert task["binding_id"] is None and task["completed_at"] is None and task["result"] is None
    form = {field["id"]: field for field in task["form"]}
    assert form["response"] == {"id": "response", "label": "Answer to the customer", "type": "string",
                                "required": True}
    assert form["amount"]["default"] == 10
    assert form["reason"]["options"] == [{"id": "damaged", "name": "Damaged"}, {"id": "late", "name": "Arrived late"}]


def test_complete_continues_the_instance_with_result_as_variables(api, approval):
    instance_id, task = approval
    answer = api.call("task.complete", task_id=task["task_id"],
                      result={"response": "Refunded", "decision": "approve", "reason": "late", "vip": True})
    assert answer == {"task_id": task["task_id"], "status": "completed", "instance_id": instance_id}
    status = api.wait_for(instance_id)
    assert status["status"] == "completed"
    assert status["variables"]["response"] == "Refunded" and status["variables"]["amount"] == 10
    done = api.call("task.list", instance_id=instance_id, status="completed")["items"]
    assert [t["task_id"] for t in done] == [task["task_id"]]
    assert done[0]["result"]["decision"] == "approve" and done[0]["completed_at"]


def test_completing_a_completed_task_is_a_conflict(api, approval):
    _, task = approval
    api.call("task.complete", task_id=task["task_id"], result={"response": "ok", "decision": "reject"})
    with pytest.raises(RpcError) as caught:
        api.call("task.complete", task_id=task["task_id"], result={"response": "ok", "decision": "reject"})
    assert (caught.value.code, caught.value.reason) == (-32602, "conflict")


def test_two_concurrent_completions_exactly_one_wins(api, approval):
    instance_id, task = approval

    def complete(decision):
        try:
            api_copy = type(api)(api.base_url, api.key)
            api_copy.call("task.complete", task_id=task["task_id"], result={"response": decision, "decision": decision})
            return "won"
        except RpcError as exc:
            return exc.reason

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(complete, ["approve", "reject"] * 3))
    assert outcomes.count("won") == 1 and outcomes.count("conflict") == 5
    assert api.wait_for(instance_id)["status"] == "completed"


@pytest.mark.parametrize("result, field", [
    ({"decision": "approve"}, "response"),
    ({"response": "x"}, "decision"),
    ({"response": "x", "decision": "maybe"}, "decision"),
    ({"response": 5, "decision": "approve"}, "response"),
    ({"response": "x", "decision": "approve", "amount": "ten"}, "amount"),
    ({"response": "x", "decision": "approve", "amount": True}, "amount"),
    ({"response": "x", "decision": "approve", "reason": "bored"}, "reason"),
    ({"response": "x", "decision": "approve", "vip": "yes"}, "vip"),
    ({"response": "x", "decision": "approve", "hacker": 1}, "hacker"),
])
def test_result_that_breaks_the_form_names_the_field_and_changes_nothing(api, approval, result, field):
    instance_id, task = approval
    with pytest.raises(RpcError) as caught:
        api.call("task.complete", task_id=task["task_id"], result=result)
    assert caught.value.reason == "invalid_params" and field in caught.value.message
    assert open_task(api, instance_id)["task_id"] == task["task_id"]


@pytest.mark.parametrize("params, named", [
    ({"task_id": "1"}, "task_id"), ({"task_id": -3}, "task_id"), ({}, "task_id"),
    ({"task_id": 1, "result": [1]}, "result"), ({"task_id": 1, "result": "x"}, "result"),
])
def test_bad_complete_params_are_invalid_params(api, params, named):
    with pytest.raises(RpcError) as caught:
        api.call("task.complete", **params)
    assert caught.value.reason == "invalid_params" and named in caught.value.message


@pytest.mark.parametrize("params, named", [
    ({"page": -1}, "page"), ({"page": 0}, "page"), ({"per_page": 101}, "per_page"),
    ({"per_page": "20"}, "per_page"), ({"status": "done"}, "status"), ({"instance_id": "x"}, "instance_id"),
])
def test_bad_list_params_are_invalid_params(api, params, named):
    with pytest.raises(RpcError) as caught:
        api.call("task.list", **params)
    assert caught.value.reason == "invalid_params" and named in caught.value.message


def test_list_defaults_and_pages(api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    ids = [api.call("process.start", definition_id=unique_code)["instance_id"] for _ in range(3)]
    task_ids = [open_task(api, i)["task_id"] for i in ids]
    first = api.call("task.list")
    assert (first["page"], first["per_page"]) == (1, 20)
    definition_id = api.call("process.status", instance_id=ids[0])["definition_id"]
    page = api.call("task.list", definition_id=definition_id, per_page=2)
    assert page["total"] == 3 and [t["task_id"] for t in page["items"]] == sorted(task_ids, reverse=True)[:2]


def test_task_without_form_accepts_any_result(api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code)["instance_id"]
    task = open_task(api, instance_id)
    api.call("task.complete", task_id=task["task_id"], result={"note": "fine", "score": 3})
    assert api.wait_for(instance_id)["variables"]["score"] == 3


def test_cancelling_the_instance_cancels_its_open_tasks(api, approval):
    instance_id, task = approval
    api.call("process.cancel", instance_id=instance_id)
    [cancelled] = api.call("task.list", instance_id=instance_id)["items"]
    assert cancelled["status"] == "cancelled" and cancelled["completed_at"]
    with pytest.raises(RpcError) as caught:
        api.call("task.complete", task_id=task["task_id"], result={"response": "x", "decision": "approve"})
    assert caught.value.reason == "conflict"


def test_other_tenant_never_sees_or_completes_our_tasks(api, other_api, approval):
    instance_id, task = approval
    assert task["task_id"] not in [t["task_id"] for t in other_api.call("task.list", per_page=100)["items"]]
    assert other_api.call("task.list", instance_id=instance_id)["total"] == 0
    with pytest.raises(RpcError) as caught:
        other_api.call("task.complete", task_id=task["task_id"], result={"response": "x", "decision": "approve"})
    assert caught.value.reason == "not_found"
    assert open_task(api, instance_id)["status"] == "in_progress"
