"""Failure handling: failed instances keep their state, are listed, and resume with process.retry."""
from __future__ import annotations

import pytest

from tests.harness import RpcError, bpmn


def test_retry_resumes_at_the_failed_script_with_merged_variables(api, unique_code):
    api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"divisor": 0, "keep": "me"})["instance_id"]
    assert api.wait_for(instance_id)["status"] == "failed"

    assert api.call("process.retry", instance_id=instance_id, variables={"divisor": 4}) == {
        "instance_id": instance_id, "status": "running"}
    status = api.wait_for(instance_id)
    assert status["status"] == "completed" and status["error"] is None
    assert status["variables"] == {"divisor": 4, "keep": "me", "ratio": 2.5}


def test_retry_without_fixing_the_cause_fails_again_the_same_way(api, unique_code):
    api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"divisor": 0})["instance_id"]
    first = api.wait_for(instance_id)
    api.call("process.retry", instance_id=instance_id)
    again = api.wait_for(instance_id)
    assert again["status"] == "failed" and again["error"] == first["error"]


def test_retry_of_a_running_or_completed_instance_is_a_conflict(api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    running = api.call("process.start", definition_id=unique_code)["instance_id"]
    with pytest.raises(RpcError) as caught:
        api.call("process.retry", instance_id=running)
    assert caught.value.reason == "conflict"
    api.deploy(bpmn("webhook_order.bpmn"), code=unique_code + "-done")
    done = api.call("process.start", definition_id=unique_code + "-done", variables={"amount": 1})["instance_id"]
    api.wait_for(done)
    with pytest.raises(RpcError) as caught:
        api.call("process.retry", instance_id=done)
    assert caught.value.reason == "conflict"
    assert api.call("process.status", instance_id=done)["status"] == "completed"


def test_retry_of_another_tenants_instance_is_not_found(api, other_api, unique_code):
    api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"divisor": 0})["instance_id"]
    api.wait_for(instance_id)
    with pytest.raises(RpcError) as caught:
        other_api.call("process.retry", instance_id=instance_id)
    assert caught.value.reason == "not_found"
    assert api.call("process.status", instance_id=instance_id)["status"] == "failed"


def test_message_for_an_instance_that_waits_for_nothing_is_a_conflict(api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code)["instance_id"]
    api.wait_for(instance_id, statuses=("running",))
    with pytest.raises(RpcError) as caught:
        api.call("process.message", instance_id=instance_id, message="payment_received")
    assert caught.value.reason == "conflict" and "payment_received" in caught.value.message


@pytest.mark.parametrize("params, named", [
    ({"instance_id": 1}, "message"), ({"message": "m"}, "instance_id"),
    ({"instance_id": 1, "message": 5}, "message"), ({"instance_id": 1, "message": "m", "variables": 3}, "variables"),
])
def test_bad_message_params_are_invalid_params(api, params, named):
    with pytest.raises(RpcError) as caught:
        api.call("process.message", **params)
    assert caught.value.reason == "invalid_params" and named in caught.value.message


def test_short_gateway_loop_completes_with_all_its_data(api, unique_code):
    api.deploy(bpmn("counting_loop.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code,
                           variables={"counter": 0, "target": 100})["instance_id"]
    status = api.wait_for(instance_id)
    assert status["status"] == "completed" and status["variables"]["counter"] == 100


def test_loop_that_would_be_silently_truncated_fails_loudly(api, unique_code):
    api.deploy(bpmn("counting_loop.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code,
                           variables={"counter": 0, "target": 5000})["instance_id"]
    status = api.wait_for(instance_id, timeout=60)
    assert status["status"] == "failed"
    assert status["error"]["element_id"] in ("count", "again")
    assert "loop" in status["error"]["message"]
    assert 0 < status["variables"]["counter"] < 5000


def test_script_producing_nan_fails_with_a_clear_message(api, unique_code):
    api.deploy(bpmn("failing_script.bpmn").replace("ratio = 10 / divisor", "ratio = float(divisor)"),
               code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"divisor": "nan"})["instance_id"]
    status = api.wait_for(instance_id)
    assert status["status"] == "failed" and status["error"]["element_id"] == "divide"
    assert "ratio" in status["error"]["message"]


def test_gateway_with_no_true_condition_names_the_gateway(api, unique_code):
    xml = bpmn("counting_loop.bpmn").replace(' default="done"', "").replace(
        '<bpmn:sequenceFlow id="done" sourceRef="again" targetRef="end" />',
        '<bpmn:sequenceFlow id="done" sourceRef="again" targetRef="end"><bpmn:conditionExpression>'
        'counter == target</bpmn:conditionExpression></bpmn:sequenceFlow>')
    api.deploy(xml, code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"counter": 5, "target": 2})["instance_id"]
    status = api.wait_for(instance_id)
    assert status["status"] == "failed"
    assert status["error"] == {"element_id": "again", "message": status["error"]["message"]}
    assert "again" in status["error"]["message"] and "default" in status["error"]["message"]


def test_retry_reopens_the_task_row_the_failure_cancelled(api, unique_code):
    import time

    api.deploy(bpmn("retry_with_open_task.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"divisor": 0})["instance_id"]
    assert api.wait_for(instance_id)["status"] == "failed"  # the script fails after the task opened
    [row] = api.call("task.list", instance_id=instance_id)["items"]
    assert row["status"] == "cancelled"

    api.call("process.retry", instance_id=instance_id, variables={"divisor": 2})
    for _ in range(500):
        [row] = api.call("task.list", instance_id=instance_id)["items"]
        if row["status"] == "in_progress":
            break
        time.sleep(0.02)
    assert row["status"] == "in_progress" and row["completed_at"] is None
    api.call("task.complete", task_id=row["task_id"], result={"ok": True})
    status = api.wait_for(instance_id)
    assert status["status"] == "completed" and status["variables"]["ratio"] == 5
