"""External tasks through the real server, on SQLite and PostgreSQL: a worker fetches and locks by
topic (long polling), completes with variables, fails with retries (the last failure fails the
instance at the task; process.retry gives it back), throws a BPMN error to the task's error
boundary event (or fails the instance when none catches it), extends its lock; a lock is held
exactly once and an expired one frees the task; tenants and permissions hold; and the documented
worker example (docs/examples/external_worker.py) really runs."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.harness import RpcError
from tests.integration.test_bpmn_runtime import start, waiting

WORKER_EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "external_worker.py"

ORDER = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d">
  <bpmn:error id="E_card" name="card declined" errorCode="CARD_DECLINED" />
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="start" />
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="invoice" />
    <bpmn:serviceTask id="invoice" camunda:type="external" camunda:topic="TOPIC" />
    <bpmn:sequenceFlow id="f2" sourceRef="invoice" targetRef="charge" />
    <bpmn:serviceTask id="charge" camunda:class="org.acme.ChargeCard" />
    <bpmn:sequenceFlow id="f3" sourceRef="charge" targetRef="done" />
    <bpmn:endEvent id="done" />
    <bpmn:boundaryEvent id="declined" attachedToRef="charge">
      <bpmn:errorEventDefinition errorRef="E_card" />
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f4" sourceRef="declined" targetRef="refused" />
    <bpmn:endEvent id="refused" />
  </bpmn:process>
</bpmn:definitions>"""


@pytest.fixture
def topic(api, unique_code):
    """A topic of this test's own (the server and tenant are shared), its process deployed."""
    api.deploy(ORDER.replace("TOPIC", unique_code), code=unique_code)
    return unique_code


def fetch(api, topic: str, worker: str = "w1", *, lock_ms: int = 30_000, wait_ms: int = 0, **params) -> list[dict]:
    return api.call("external.fetch_and_lock", worker_id=worker, topics=[{"name": topic, "lock_duration_ms": lock_ms}],
                    wait_ms=wait_ms, **params)["tasks"]


def fetch_one(api, topic: str, worker: str = "w1", **params) -> dict:
    [task] = fetch(api, topic, worker, wait_ms=10_000, **params)
    return task


def test_a_worker_fetches_completes_and_the_instance_goes_on_with_its_variables(api, topic):
    instance_id = start(api, topic, order_id=7)
    status = waiting(api, instance_id, "invoice")
    assert {"element_id": "invoice", "kind": "serviceTask", "topic": topic} in status["waiting_for"]
    task = fetch_one(api, topic)
    assert task["topic"] == topic and task["instance_id"] == instance_id and task["element_id"] == "invoice"
    assert task["variables"] == {"order_id": 7} and task["worker_id"] == "w1" and task["retries"] is None
    assert fetch(api, topic, "w2") == []  # locked: exactly one worker holds it
    done = api.call("external.complete", task_id=task["task_id"], worker_id="w1", variables={"invoice": "INV-7"})
    assert done == {"task_id": task["task_id"], "status": "completed", "instance_id": instance_id}
    with pytest.raises(RpcError) as again:
        api.call("external.complete", task_id=task["task_id"], worker_id="w1")
    assert again.value.reason == "conflict" and "is completed" in again.value.message
    status = waiting(api, instance_id, "charge")
    assert status["variables"] == {"order_id": 7, "invoice": "INV-7"}
    assert {"element_id": "charge", "kind": "serviceTask", "topic": "org.acme.ChargeCard"} in status["waiting_for"]
    listed = api.call("external.list", instance_id=instance_id)["items"]
    assert [(t["element_id"], t["status"]) for t in listed] == [("charge", "open"), ("invoice", "completed")]


def test_a_long_poll_waits_for_work_and_answers_when_a_task_opens(api, topic):
    got: list = []
    poller = threading.Thread(target=lambda: got.append((fetch(api, topic, wait_ms=15_000), time.monotonic())))
    began = time.monotonic()
    poller.start()
    time.sleep(0.5)  # the poll is waiting before any task exists
    instance_id = start(api, topic, order_id=1)
    poller.join(20)
    [(tasks, answered)] = got
    assert [t["instance_id"] for t in tasks] == [instance_id]
    assert answered - began < 10  # woken by the task, not by the end of the wait
    empty_began = time.monotonic()
    assert fetch(api, topic, wait_ms=1_200) == []  # nothing more: it waits the whole time, then answers empty
    assert 1.1 < time.monotonic() - empty_began < 8


def test_failures_with_retries_come_back_and_the_last_one_fails_the_instance_at_the_task(api, topic):
    instance_id = start(api, topic, order_id=3)
    task = fetch_one(api, topic)
    answer = api.call("external.failure", task_id=task["task_id"], worker_id="w1", message="printer jammed",
                      retries=1, retry_timeout_ms=800)
    assert answer["retries"] == 1 and answer["instance_fails"] is False
    assert fetch(api, topic) == []  # not before its retry time
    again = fetch_one(api, topic, "w2")
    assert again["task_id"] == task["task_id"] and again["retries"] == 1 and again["error_message"] == "printer jammed"
    api.call("external.failure", task_id=task["task_id"], worker_id="w2", message="printer on fire", retries=0)
    failed = api.wait_for(instance_id)
    assert failed["status"] == "failed"
    assert failed["error"] == {"element_id": "invoice", "message": f"The external task 'invoice' (topic '{topic}') "
                                                                   "failed with no retries left: printer on fire"}
    assert fetch(api, topic) == []
    api.call("process.retry", instance_id=instance_id)  # the task goes back to the workers
    retried = fetch_one(api, topic)
    assert retried["task_id"] == task["task_id"] and retried["retries"] is None
    api.call("external.complete", task_id=task["task_id"], worker_id="w1")
    waiting(api, instance_id, "charge")


def test_a_bpmn_error_reaches_the_error_boundary_event_or_fails_the_instance(api, topic):
    caught = start(api, topic, order_id=4)
    api.call("external.complete", task_id=fetch_one(api, topic)["task_id"], worker_id="w1")
    [charge] = fetch(api, "org.acme.ChargeCard", wait_ms=10_000, max_tasks=1)
    while charge["instance_id"] != caught:  # other tests' charge tasks share this topic: leave them
        api.call("external.failure", task_id=charge["task_id"], worker_id="w1", message="not mine", retries=1,
                 retry_timeout_ms=60_000)
        [charge] = fetch(api, "org.acme.ChargeCard", wait_ms=10_000, max_tasks=1)
    api.call("external.bpmn_error", task_id=charge["task_id"], worker_id="w1", error_code="CARD_DECLINED",
             message="insufficient funds", variables={"reason": "funds"})
    done = api.wait_for(caught)
    assert done["status"] == "completed" and done["variables"]["reason"] == "funds"
    uncaught = start(api, topic, order_id=5)
    task = fetch_one(api, topic)
    api.call("external.bpmn_error", task_id=task["task_id"], worker_id="w1", error_code="OUT_OF_PAPER")
    failed = api.wait_for(uncaught)
    assert failed["status"] == "failed"
    assert failed["error"] == {"element_id": "invoice", "message": "The worker reported the BPMN error 'OUT_OF_PAPER' "
                                                                   "at 'invoice', and no error boundary event of the "
                                                                   "task catches it."}


def test_an_expired_lock_frees_the_task_and_the_old_holder_can_no_longer_report(api, topic):
    start(api, topic, order_id=6)
    task = fetch_one(api, topic, lock_ms=600)
    extended = api.call("external.extend_lock", task_id=task["task_id"], worker_id="w1", lock_duration_ms=800)
    assert extended["lock_expires_at"] > task["lock_expires_at"]
    assert fetch(api, topic, "w2") == []
    taken = fetch_one(api, topic, "w2")  # once the extended lock has run out
    assert taken["task_id"] == task["task_id"] and taken["worker_id"] == "w2"
    with pytest.raises(RpcError) as late:
        api.call("external.complete", task_id=task["task_id"], worker_id="w1")
    assert late.value.reason == "conflict" and "not locked by worker 'w1'" in late.value.message
    api.call("external.complete", task_id=task["task_id"], worker_id="w2")


def test_two_workers_fetching_at_once_never_get_the_same_task(api, topic):
    ids = [start(api, topic, order_id=n) for n in range(6)]
    for instance_id in ids:
        waiting(api, instance_id, "invoice")
    results: dict[str, list] = {}
    workers = [threading.Thread(target=lambda w=w: results.__setitem__(w, fetch(api, topic, w, max_tasks=6)))
               for w in ("a", "b", "c")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(20)
    got = [t["task_id"] for tasks in results.values() for t in tasks]
    assert len(got) == len(set(got)) == 6


def test_tenants_do_not_see_each_others_tasks_and_bad_params_are_refused(api, other_api, topic):
    instance_id = start(api, topic, order_id=8)
    waiting(api, instance_id, "invoice")
    assert fetch(other_api, topic) == []
    task = fetch_one(api, topic)
    with pytest.raises(RpcError) as foreign:
        other_api.call("external.complete", task_id=task["task_id"], worker_id="w1")
    assert foreign.value.reason == "not_found"
    for params, phrase in (({"topics": []}, "'topics' must hold 1 to 50 topics"),
                           ({"topics": [{"name": topic}]}, "Missing required parameter 'topics[0].lock_duration_ms'"),
                           ({"topics": [{"name": topic, "lock_duration_ms": 10}], "wait_ms": 600_000},
                            "'wait_ms' must be at most 60000")):
        with pytest.raises(RpcError) as bad:
            api.call("external.fetch_and_lock", worker_id="w1", **params)
        assert bad.value.reason == "invalid_params" and phrase in bad.value.message
    api.call("external.complete", task_id=task["task_id"], worker_id="w1")


def test_the_permission_group_external_is_needed(server, api, topic):
    key = api.call("apikey.create", name="worker", permissions=["external.*"])["api_key"]
    worker = server.api(key)
    assert fetch(worker, topic) == []
    with pytest.raises(RpcError) as denied:
        worker.call("process.start", definition_id=topic)
    assert denied.value.reason == "forbidden"
    reader = server.api(api.call("apikey.create", name="reader", permissions=["process.*"])["api_key"])
    with pytest.raises(RpcError) as denied:
        fetch(reader, topic)
    assert denied.value.reason == "forbidden" and denied.value.data["permission"] == "external.fetch_and_lock"


def test_the_documented_worker_example_runs(server, api, unique_code):
    assert WORKER_EXAMPLE.read_text() in (WORKER_EXAMPLE.parents[1] / "api.md").read_text()  # as documented
    api.deploy(ORDER.replace("TOPIC", "invoiceCreator"), code=unique_code)
    key = api.call("apikey.create", name="example", permissions=["external.*"])["api_key"]
    paid, unpaid = start(api, unique_code, order_id=42), start(api, unique_code)
    env = {**os.environ, "BATON_URL": server.base_url, "BATON_API_KEY": key}
    worker = subprocess.Popen([sys.executable, str(WORKER_EXAMPLE)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        assert waiting(api, paid, "charge")["variables"]["invoice"] == "INV-42"
        failed = api.wait_for(unpaid, timeout=30)
        assert failed["status"] == "failed" and failed["error"]["element_id"] == "invoice"
        assert failed["error"]["message"].endswith("failed with no retries left: no 'order_id'")
    finally:
        worker.kill()
        worker.communicate(timeout=10)  # reads and closes its output
