"""baton.client.ExternalTaskWorker against the real server, on SQLite and PostgreSQL: two worker
processes share 200 tasks, each done exactly once; a killed worker's tasks are done by another once
their locks expire; SIGTERM lets the running handlers finish; failures are retried with back-off
until the incident; a BPMN error reaches the boundary; a long handler keeps its lock."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from baton.client import BpmnError, Client, ExternalTaskWorker
from tests.harness import ROOT, wait_until_idle

MODEL = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
                  xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d">
  <bpmn:error id="no_stock" errorCode="NO_STOCK" />
  <bpmn:process id="CODE" isExecutable="true">
    <bpmn:startEvent id="start" />
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work" />
    <bpmn:serviceTask id="work" camunda:type="external" camunda:topic="TOPIC" />
    <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="done" />
    <bpmn:endEvent id="done" />
    <bpmn:boundaryEvent id="out_of_stock" attachedToRef="work">
      <bpmn:errorEventDefinition errorRef="no_stock" /></bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="out_of_stock" targetRef="reorder" />
    <bpmn:userTask id="reorder" />
    <bpmn:sequenceFlow id="f4" sourceRef="reorder" targetRef="done_later" />
    <bpmn:endEvent id="done_later" />
  </bpmn:process>
</bpmn:definitions>"""


@pytest.fixture
def client(server, admin_key):
    with Client(server.base_url, admin_key) as client:
        yield client


@pytest.fixture
def topic(client, unique_code) -> str:
    client.definition.deploy(MODEL.replace("CODE", unique_code).replace("TOPIC", unique_code), code=unique_code)
    return unique_code


def start(client, code: str, count: int = 1) -> list[int]:
    return [client.process.start(code)["instance_id"] for _ in range(count)]


class WorkerProcess:
    """``python -m tests.client_worker`` (an ExternalTaskWorker in a process of its own)."""

    def __init__(self, server, key: str, worker_id: str, topic: str, mode: str, workdir: Path, *extra: str):
        self.record = workdir / f"{worker_id}.done"
        self.record.touch()
        self.log = workdir / f"{worker_id}.log"
        env = {**os.environ, "BATON_URL": server.base_url, "BATON_API_KEY": key, "PYTHONUNBUFFERED": "1"}
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "tests.client_worker", worker_id, topic, mode,
                                             str(self.record), *extra], cwd=ROOT, env=env, stdout=log,
                                            stderr=subprocess.STDOUT)
        until(lambda: "running" in self.log.read_text(), f"{worker_id} to start: {self.log}")

    def done(self) -> list[tuple[int, int]]:
        return [tuple(map(int, line.split())) for line in self.record.read_text().splitlines()]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def until(check, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"waited {timeout}s for {what}"
        time.sleep(0.05)
    return result


def completed(client, instance_ids: list[int]) -> bool:
    return all(client.process.status(i)["status"] == "completed" for i in instance_ids)


def test_two_workers_do_200_tasks_each_exactly_once(server, client, admin_key, topic, tmp_path):
    workers = [WorkerProcess(server, admin_key, f"w{n}-{topic}", topic, "complete", tmp_path) for n in (1, 2)]
    try:
        instances = start(client, topic, 200)
        until(lambda: completed(client, instances[-20:]) and completed(client, instances), "200 instances")
    finally:
        for worker in workers:
            worker.stop()
    done = [entry for worker in workers for entry in worker.done()]
    tasks = client.external.list(topic=topic, per_page=100)["total"]

    assert len(done) == 200 and {instance for _, instance in done} == set(instances)
    assert len({task for task, _ in done}) == 200 and tasks == 200
    assert all(worker.done() for worker in workers)  # both took a share
    assert client.external.list(topic=topic, status="completed")["total"] == 200


def test_a_killed_workers_locked_tasks_are_done_by_another_once_the_locks_expire(server, client, admin_key, topic,
                                                                                  tmp_path):
    hanging = WorkerProcess(server, admin_key, f"hang-{topic}", topic, "hang", tmp_path, "5", "1500")
    instances = start(client, topic, 5)
    until(lambda: len(hanging.done()) == 5, "the first worker to lock all five")
    locked = {task["worker_id"] for task in client.external.list(topic=topic, status="open")["items"]}
    hanging.stop()  # kill -9: its locks are no longer extended
    rescuer = WorkerProcess(server, admin_key, f"rescue-{topic}", topic, "complete", tmp_path)
    try:
        until(lambda: completed(client, instances), "the second worker to do the five")
    finally:
        rescuer.stop()

    assert locked == {f"hang-{topic}"}
    assert sorted(instance for _, instance in rescuer.done()) == sorted(instances)
    assert all(client.process.status(i)["variables"]["done_by"] == f"rescue-{topic}" for i in instances)


def test_sigterm_lets_the_running_handlers_finish_and_report_then_fetches_nothing_more(server, client, admin_key,
                                                                                       topic, tmp_path):
    worker = WorkerProcess(server, admin_key, f"slow-{topic}", topic, "slow", tmp_path, "2")
    instances = start(client, topic, 2)
    until(lambda: len(worker.done()) == 2, "both handlers to run")
    worker.process.send_signal(signal.SIGTERM)

    assert worker.process.wait(20) == 0
    assert "stopped" in worker.log.read_text()
    until(lambda: completed(client, instances), "both reports")
    later = start(client, topic)[0]
    wait_until_idle(server.base_url)

    assert client.external.list(instance_id=later)["items"][0]["status"] == "open"
    assert len(worker.done()) == 2


def run_in_thread(worker: ExternalTaskWorker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    return thread


def test_failures_are_retried_with_back_off_until_the_incident(client, topic):
    tries: list[float] = []
    worker = ExternalTaskWorker(client, f"flaky-{topic}", retries=3, backoff_ms=400, wait_ms=500)

    @worker.subscribe(topic)
    def always_fails(task):
        tries.append(time.monotonic())
        raise ValueError(f"printer on fire ({task.retries} retries left)")

    thread = run_in_thread(worker)
    instance_id = start(client, topic)[0]
    until(lambda: client.process.status(instance_id)["status"] == "failed", "the incident", 30)
    worker.stop()
    thread.join(20)
    status = client.process.status(instance_id)

    assert len(tries) == 3
    assert tries[1] - tries[0] >= 0.4 and tries[2] - tries[1] >= 0.8  # 400 ms, then 800 ms
    assert "ValueError: printer on fire (1 retries left)" in status["error"]["message"]
    assert status["error"]["element_id"] == "work"


def test_a_bpmn_error_raised_by_the_handler_takes_the_error_boundary(client, topic):
    worker = ExternalTaskWorker(client, f"stock-{topic}", wait_ms=500)
    worker.subscribe(topic, lambda task: (_ for _ in ()).throw(BpmnError("NO_STOCK", "none left", {"sku": "A-1"})))
    thread = run_in_thread(worker)
    instance_id = start(client, topic)[0]
    until(lambda: client.process.status(instance_id)["waiting_for"], "the boundary path")
    worker.stop()
    thread.join(20)
    status = client.process.status(instance_id)

    assert [entry["element_id"] for entry in status["waiting_for"]] == ["reorder"]
    assert status["variables"]["sku"] == "A-1"


def test_a_handler_longer_than_its_lock_keeps_the_lock_and_no_other_worker_gets_the_task(client, topic):
    seen: dict[str, list[int]] = {"long": [], "other": []}
    long = ExternalTaskWorker(client, f"long-{topic}", lock_duration_ms=1000, wait_ms=500)
    other = ExternalTaskWorker(client, f"other-{topic}", lock_duration_ms=1000, wait_ms=500)

    @long.subscribe(topic)
    def slow(task):
        seen["long"].append(task.task_id)
        time.sleep(3)
        return {"done_by": "long"}

    long_thread = run_in_thread(long)
    instance_id = start(client, topic)[0]
    until(lambda: seen["long"], "the long handler to start")
    other.subscribe(topic, lambda task: seen["other"].append(task.task_id))
    other_thread = run_in_thread(other)
    until(lambda: client.process.status(instance_id)["status"] == "completed", "the long handler's report")
    for worker, thread in ((long, long_thread), (other, other_thread)):
        worker.stop()
        thread.join(20)

    assert seen == {"long": seen["long"], "other": []} and len(seen["long"]) == 1
    assert client.process.status(instance_id)["variables"]["done_by"] == "long"


EXAMPLE = ROOT / "docs" / "examples" / "client_worker.py"
# The example's model: MODEL with the example's topic and error code.
INVOICES = MODEL.replace("CODE", "invoicing").replace("TOPIC", "invoiceCreator").replace("NO_STOCK", "INVALID_ORDER")


def test_the_documented_worker_example_runs_as_documented(server):
    assert EXAMPLE.read_text() in (ROOT / "docs" / "client.md").read_text()
    admin = Client(server.base_url, server.create_tenant(f"invoices-{os.getpid()}-{time.monotonic_ns()}"))
    admin.definition.deploy(INVOICES)
    key = admin.apikey.create("invoicer", ["external.*"])["api_key"]
    paid, invalid, broken = (admin.process.start("invoicing", variables=v)["instance_id"]
                             for v in ({"order_id": 42}, {"order_id": 0}, {}))
    env = {**os.environ, "BATON_URL": server.base_url, "BATON_API_KEY": key, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen([sys.executable, str(EXAMPLE)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        until(lambda: completed(admin, [paid]), "the invoice")
        until(lambda: admin.process.status(invalid)["waiting_for"], "the error boundary's task")
        until(lambda: admin.process.status(broken)["status"] == "failed", "the incident after three tries", 30)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    finally:
        worker.kill()
        worker.communicate(timeout=10)

    assert admin.process.status(paid)["variables"]["invoice"] == "INV-42"
    assert [e["element_id"] for e in admin.process.status(invalid)["waiting_for"]] == ["reorder"]
    assert "KeyError: 'order_id'" in admin.process.status(broken)["error"]["message"]
