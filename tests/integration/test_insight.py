"""process.path, definition.stats, definition.instances_at and auth.whoami over real HTTP, on
SQLite and PostgreSQL (the console's views of runs, docs/api.md)."""
from __future__ import annotations

import re
import time

import pytest

from tests.harness import RpcError, bpmn

ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def open_task(api, instance_id, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = api.call("task.list", instance_id=instance_id, status="in_progress")["items"]
        if items:
            return items[0]
        time.sleep(0.02)
    raise AssertionError(f"no open task for instance {instance_id}")


def start(api, code, **variables):
    return api.call("process.start", definition_id=code, variables=variables)["instance_id"]


def flows(path):
    return {(flow["from"], flow["to"]) for flow in path["flows"]}


def test_path_of_a_waiting_instance_names_its_task_and_the_way_there(api, unique_code):
    api.deploy(bpmn("approval_form.bpmn"), code=unique_code)
    instance_id = start(api, unique_code)
    task = open_task(api, instance_id)

    path = api.call("process.path", instance_id=instance_id)

    assert path["status"] == "running" and path["failed"] is None
    assert [p["element_id"] for p in path["passed"]] == ["start"]
    [waiting] = path["waiting"]
    assert waiting["element_id"] == "approve" and waiting["kind"] == "userTask"
    assert waiting["task_ids"] == [task["task_id"]] and ISO_MS.match(waiting["since"])
    assert flows(path) == {("start", "approve")}
    assert [(h["element_id"], h["state"]) for h in path["history"]] == [("start", "completed"), ("approve", "waiting")]


def test_path_after_completion_lists_elements_in_order_and_only_the_branch_taken(api, unique_code):
    api.deploy(bpmn("approval_form.bpmn"), code=unique_code)
    instance_id = start(api, unique_code)
    task = open_task(api, instance_id)
    api.call("task.complete", task_id=task["task_id"], result={"response": "ok", "decision": "approve"})
    assert api.wait_for(instance_id)["status"] == "completed"

    path = api.call("process.path", instance_id=instance_id)

    assert [p["element_id"] for p in path["passed"]] == ["start", "approve", "route", "approved"]
    approve = next(p for p in path["passed"] if p["element_id"] == "approve")
    assert approve["name"] == "Approve the refund" and approve["kind"] == "userTask" and approve["times"] == 1
    assert approve["first_at"] <= approve["last_at"] and ISO_MS.match(approve["last_at"])
    assert flows(path) == {("start", "approve"), ("approve", "route"), ("route", "approved")}
    assert ("route", "rejected") not in flows(path)
    assert path["waiting"] == [] and path["history_total"] == 4
    times = [h["at"] for h in path["history"]]
    assert times == sorted(times)


def test_path_of_a_failed_instance_names_the_failed_element(api, unique_code):
    api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    instance_id = start(api, unique_code)
    assert api.wait_for(instance_id)["status"] == "failed"

    path = api.call("process.path", instance_id=instance_id)

    assert path["failed"]["element_id"] == "divide" and "divisor" in path["failed"]["message"]
    assert ("divide", "failed") in [(h["element_id"], h["state"]) for h in path["history"]]
    assert "divide" not in [p["element_id"] for p in path["passed"]]
    assert ("start", "divide") in flows(path)


def test_path_counts_both_branches_into_a_parallel_join(api, unique_code):
    api.deploy(bpmn("cov_parallel_gateway.bpmn"), code=unique_code)
    instance_id = start(api, unique_code)
    api.call("task.complete", task_id=open_task(api, instance_id)["task_id"], result={})
    assert api.wait_for(instance_id)["status"] == "completed"

    path = api.call("process.path", instance_id=instance_id)

    assert {("pack", "join"), ("invoice", "join"), ("join", "end")} <= flows(path)
    assert [p["times"] for p in path["passed"] if p["element_id"] == "join"] == [1]


def test_path_counts_each_pass_through_a_loop(api, unique_code):
    api.deploy(bpmn("counting_loop.bpmn"), code=unique_code)
    instance_id = start(api, unique_code, counter=0, target=3)
    assert api.wait_for(instance_id)["status"] == "completed"

    path = api.call("process.path", instance_id=instance_id)

    times = {p["element_id"]: p["times"] for p in path["passed"]}
    assert times == {"start": 1, "count": 3, "again": 3, "end": 1}
    assert flows(path) == {("start", "count"), ("count", "again"), ("again", "count"), ("again", "end")}
    assert [h["element_id"] for h in path["history"]] == ["start", *["count", "again"] * 3, "end"]
    assert path["history_total"] == 8


def test_path_enters_embedded_subprocesses(api, unique_code):
    api.deploy(bpmn("cov_subprocess.bpmn"), code=unique_code)
    instance_id = start(api, unique_code, quantity=12, shipping=1)
    assert api.wait_for(instance_id)["status"] == "completed"

    path = api.call("process.path", instance_id=instance_id)

    passed = [p["element_id"] for p in path["passed"]]
    assert {"pricing", "base_price", "bulk", "discount", "total"} <= set(passed)
    assert ("bulk", "discount") in flows(path) and ("bulk", "pricing_end") not in flows(path)


def test_stats_count_waiting_failed_and_passed_per_element(api, unique_code):
    deployed = api.deploy(bpmn("approval_form.bpmn"), code=unique_code)
    ids = [start(api, unique_code) for _ in range(3)]
    tasks = [open_task(api, instance_id) for instance_id in ids]
    api.call("task.complete", task_id=tasks[0]["task_id"], result={"response": "x", "decision": "reject"})
    api.wait_for(ids[0])

    stats = api.call("definition.stats", definition_id=deployed["definition_id"])

    by_element = {e["element_id"]: e for e in stats["elements"]}
    assert by_element["approve"] == {"element_id": "approve", "waiting": 2, "failed": 0, "passed": 1}
    assert by_element["start"]["passed"] == 3 and by_element["rejected"]["passed"] == 1
    assert "approved" not in by_element
    assert stats["instances"] == {"running": 2, "completed": 1, "cancelled": 0, "failed": 0}
    assert stats["passed_sample"] == 3
    assert api.call("definition.stats", definition_id=deployed["definition_id"], sample=1)["passed_sample"] == 1
    unsampled = api.call("definition.stats", definition_id=deployed["definition_id"], sample=0)
    assert {e["element_id"]: e["passed"] for e in unsampled["elements"]} == {"approve": 0}


def test_stats_and_instances_at_for_failures(api, unique_code):
    deployed = api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    ids = [start(api, unique_code) for _ in range(3)]
    for instance_id in ids:
        assert api.wait_for(instance_id)["status"] == "failed"
    definition_id = deployed["definition_id"]

    stats = api.call("definition.stats", definition_id=definition_id)
    assert {e["element_id"]: e["failed"] for e in stats["elements"]}["divide"] == 3

    page = api.call("definition.instances_at", definition_id=definition_id, element_id="divide",
                    state="failed", per_page=2)
    assert page["total"] == 3 and [i["instance_id"] for i in page["items"]] == sorted(ids, reverse=True)[:2]
    nothing = api.call("definition.instances_at", definition_id=definition_id, element_id="end", state="failed")
    assert nothing["total"] == 0 and nothing["items"] == []


def test_instances_at_lists_the_instances_waiting_at_an_element(api, unique_code):
    deployed = api.deploy(bpmn("approval_form.bpmn"), code=unique_code)
    ids = [start(api, unique_code) for _ in range(2)]
    for instance_id in ids:
        open_task(api, instance_id)
    page = api.call("definition.instances_at", definition_id=deployed["definition_id"],
                    element_id="approve", state="waiting")
    assert sorted(i["instance_id"] for i in page["items"]) == sorted(ids)
    assert {i["status"] for i in page["items"]} == {"running"}


def test_another_tenant_sees_none_of_it(api, other_api, unique_code):
    deployed = api.deploy(bpmn("approval_form.bpmn"), code=unique_code)
    instance_id = start(api, unique_code)
    for method, params in [("process.path", {"instance_id": instance_id}),
                           ("definition.stats", {"definition_id": deployed["definition_id"]}),
                           ("definition.instances_at", {"definition_id": deployed["definition_id"],
                                                        "element_id": "approve", "state": "waiting"})]:
        with pytest.raises(RpcError) as caught:
            other_api.call(method, **params)
        assert caught.value.reason == "not_found", method


def test_bad_params_are_named(api, unique_code):
    deployed = api.deploy(bpmn("approval_form.bpmn"), code=unique_code)
    for method, params, named in [
            ("process.path", {"instance_id": "7"}, "instance_id"),
            ("process.path", {"instance_id": 1, "depth": 2}, "depth"),
            ("definition.stats", {"definition_id": deployed["definition_id"], "sample": 5000}, "sample"),
            ("definition.instances_at", {"definition_id": deployed["definition_id"], "element_id": "x",
                                         "state": "passed"}, "state")]:
        with pytest.raises(RpcError) as caught:
            api.call(method, **params)
        assert caught.value.reason == "invalid_params" and named in caught.value.message, method


def test_permissions_and_whoami(server, api):
    operator = server.api(api.call("apikey.create", name="operator", permissions=["process.*", "task.list"])["api_key"])
    me = operator.call("auth.whoami")
    assert me["name"] == "operator" and me["permissions"] == ["process.*", "task.list"]
    assert "process.path" in me["methods"] and "task.list" in me["methods"] and "auth.whoami" in me["methods"]
    assert "definition.stats" not in me["methods"] and "task.complete" not in me["methods"]
    with pytest.raises(RpcError) as caught:
        operator.call("definition.stats", definition_id=1)
    assert caught.value.reason == "forbidden" and caught.value.data["permission"] == "admin"
    admin = api.call("auth.whoami")
    assert admin["permissions"] == ["*"] and "definition.stats" in admin["methods"]
    assert "api_key" not in admin and admin["prefix"] and admin["tenant"]
