"""process.* over real HTTP against a running server, on SQLite and PostgreSQL."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.harness import RpcError, bpmn

ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def test_start_by_code_runs_script_and_gateway_to_completion(api, unique_code):
    deployed = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)

    started = api.call("process.start", definition_id=unique_code, variables={"amount": 70})

    assert started == {"instance_id": started["instance_id"], "status": "running",
                       "definition_id": deployed["definition_id"]}
    status = api.wait_for(started["instance_id"])
    assert status["status"] == "completed"
    # end_big has output_keys = total,label: only those come back
    assert status["variables"] == {"total": 140, "label": "big"}
    assert status["code"] == unique_code and status["version"] == 1
    assert ISO_MS.match(status["started_at"]) and ISO_MS.match(status["completed_at"])
    assert status["error"] is None


def test_end_event_without_output_keys_returns_all_variables(api, unique_code):
    api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)
    started = api.call("process.start", definition_id=unique_code, variables={"amount": 3, "note": "x"})
    status = api.wait_for(started["instance_id"])
    assert status["variables"] == {"amount": 3, "note": "x", "total": 6, "label": "small"}


def test_integer_definition_id_starts_that_exact_version(api, unique_code):
    first = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)
    second = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)
    assert (first["version"], second["version"]) == (1, 2)

    by_id = api.call("process.start", definition_id=first["definition_id"], variables={"amount": 1})
    by_code = api.call("process.start", definition_id=unique_code, variables={"amount": 1})

    assert by_id["definition_id"] == first["definition_id"]
    assert by_code["definition_id"] == second["definition_id"]
    assert api.wait_for(by_id["instance_id"])["version"] == 1


def test_running_instance_reports_what_it_waits_for(api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    started = api.call("process.start", definition_id=unique_code, variables={"who": "ann"})
    status = api.wait_for(started["instance_id"], statuses=("running",))
    for _ in range(200):
        if status["waiting_for"]:
            break
        status = api.call("process.status", instance_id=started["instance_id"])
    assert status["waiting_for"] == [{"element_id": "review", "kind": "userTask"}]
    assert status["completed_at"] is None
    assert status["variables"] == {"who": "ann"}


def test_cancel_running_instance_and_cancel_again_answers_the_same(api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code)["instance_id"]

    assert api.call("process.cancel", instance_id=instance_id) == {"instance_id": instance_id,
                                                                   "status": "cancelled"}
    assert api.call("process.cancel", instance_id=instance_id) == {"instance_id": instance_id,
                                                                   "status": "cancelled"}
    status = api.call("process.status", instance_id=instance_id)
    assert status["status"] == "cancelled" and ISO_MS.match(status["completed_at"])


def test_cancel_completed_instance_is_a_conflict(api, unique_code):
    api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"amount": 1})["instance_id"]
    api.wait_for(instance_id)
    with pytest.raises(RpcError) as caught:
        api.call("process.cancel", instance_id=instance_id)
    assert (caught.value.code, caught.value.reason) == (-32602, "conflict")
    assert api.call("process.status", instance_id=instance_id)["status"] == "completed"


def test_failing_script_fails_instance_with_element_and_message(api, unique_code):
    api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"divisor": 0})["instance_id"]
    status = api.wait_for(instance_id)
    assert status["status"] == "failed"
    assert status["error"]["element_id"] == "divide"
    assert "ZeroDivisionError" in status["error"]["message"]
    assert "Traceback" not in status["error"]["message"]
    assert ISO_MS.match(status["completed_at"])
    failed = api.call("process.list", status="failed")
    listed = next(item for item in failed["items"] if item["instance_id"] == instance_id)
    assert listed["failed_at"] == "divide" and listed["waiting_at"] == []


def test_endless_script_hits_time_limit_and_server_keeps_serving(api, unique_code):
    api.deploy(bpmn("endless_script.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code)["instance_id"]
    status = api.wait_for(instance_id, timeout=30)
    assert status["status"] == "failed"
    assert status["error"]["element_id"] == "spin"
    assert "time limit" in status["error"]["message"]
    # the sandbox host was replaced: the next instance runs normally
    api.deploy(bpmn("webhook_order.bpmn"), code=unique_code + "-after")
    after = api.call("process.start", definition_id=unique_code + "-after", variables={"amount": 2})
    assert api.wait_for(after["instance_id"])["status"] == "completed"


def test_condition_cannot_escape_the_sandbox(api, unique_code):
    marker = Path("/tmp/baton-pwned")
    marker.unlink(missing_ok=True)
    with pytest.raises(RpcError) as caught:
        api.deploy(bpmn("escaping_condition.bpmn"), code=unique_code)
    assert caught.value.reason == "invalid_params"
    assert caught.value.data["errors"][0]["element_id"] == "f2"
    assert not marker.exists()


def test_list_pages_newest_first_with_filters(api, unique_code):
    deployed = api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    ids = [api.call("process.start", definition_id=unique_code)["instance_id"] for _ in range(3)]

    page = api.call("process.list", definition_id=deployed["definition_id"], per_page=2)
    assert page["total"] == 3 and page["page"] == 1 and page["per_page"] == 2
    assert [item["instance_id"] for item in page["items"]] == sorted(ids, reverse=True)[:2]
    second = api.call("process.list", definition_id=deployed["definition_id"], per_page=2, page=2)
    assert [item["instance_id"] for item in second["items"]] == [min(ids)]
    assert set(second["items"][0]) == {"instance_id", "status", "definition_id", "started_at", "completed_at",
                                       "waiting_at", "failed_at"}
    api.wait_until_idle()
    listed = api.call("process.list", definition_id=deployed["definition_id"])["items"]
    assert [(item["waiting_at"], item["failed_at"]) for item in listed] == [(["review"], None)] * 3
    api.call("process.cancel", instance_id=ids[0])
    cancelled = api.call("process.list", definition_id=deployed["definition_id"], status="cancelled")["items"]
    assert [(item["instance_id"], item["waiting_at"]) for item in cancelled] == [(ids[0], [])]


@pytest.mark.parametrize("params, named", [
    ({}, "definition_id"),
    ({"definition_id": True}, "definition_id"),
    ({"definition_id": 1.5}, "definition_id"),
    ({"definition_id": ["x"]}, "definition_id"),
    ({"definition_id": "x", "variables": [1]}, "variables"),
    ({"definition_id": "x", "variables": "a=1"}, "variables"),
    ({"definition_id": "x", "surprise": 1}, "surprise"),
])
def test_start_with_bad_params_names_the_parameter(api, params, named):
    with pytest.raises(RpcError) as caught:
        api.call("process.start", **params)
    assert (caught.value.code, caught.value.reason) == (-32602, "invalid_params")
    assert named in caught.value.message


@pytest.mark.parametrize("instance_id", ["1", -1, 0, 2**70, None, {"a": 1}])
def test_status_with_bad_instance_id_is_invalid_params(api, instance_id):
    with pytest.raises(RpcError) as caught:
        api.call("process.status", instance_id=instance_id)
    assert caught.value.reason == "invalid_params" and "instance_id" in caught.value.message


def test_unknown_definition_and_instance_are_not_found(api):
    with pytest.raises(RpcError) as caught:
        api.call("process.start", definition_id="no-such-code")
    assert caught.value.reason == "not_found"
    with pytest.raises(RpcError) as caught:
        api.call("process.status", instance_id=987654321)
    assert caught.value.reason == "not_found"


def test_other_tenant_sees_nothing_of_ours(api, other_api, unique_code):
    deployed = api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code)["instance_id"]

    for method, params in [("process.status", {"instance_id": instance_id}),
                           ("process.cancel", {"instance_id": instance_id}),
                           ("process.start", {"definition_id": deployed["definition_id"]}),
                           ("process.start", {"definition_id": unique_code}),
                           ("definition.get", {"definition_id": deployed["definition_id"]})]:
        with pytest.raises(RpcError) as caught:
            other_api.call(method, **params)
        assert caught.value.reason == "not_found", method
    listed = other_api.call("process.list", definition_id=deployed["definition_id"])
    assert listed["total"] == 0 and listed["items"] == []
    assert api.call("process.status", instance_id=instance_id)["status"] == "running"


def test_unicode_variables_round_trip(api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    variables = {"name": "Zoë 🚀 日本", "nested": {"list": [1, 2.5, None, True]}}
    instance_id = api.call("process.start", definition_id=unique_code, variables=variables)["instance_id"]
    status = api.wait_for(instance_id, statuses=("running",))
    assert status["variables"] == variables
