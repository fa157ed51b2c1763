"""``BATON_LOG_FORMAT=json``: the server's stderr is one JSON object per log line, carrying the
request id and tenant of a request, and the job, instance and tenant of a job; the default stays
plain text for a person at a terminal; a burst of requests does not flood it."""
from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.conftest import BACKENDS
from tests.harness import BatonServer, bpmn

TEXT_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ [\w.]+: ")


def log_records(output: str) -> list[dict]:
    """Every JSON line of the output; no line may look like a text-format log line."""
    records = []
    for line in output.splitlines():
        assert not TEXT_LOG_LINE.match(line), line
        if line.startswith("{"):
            record = json.loads(line)
            assert {"time", "level", "logger", "message"} <= set(record), record
            records.append(record)
    return records


@pytest.mark.parametrize("backend", BACKENDS)
def test_json_lines_carry_the_ids_of_the_request_and_of_the_job(backend, own_database, tmp_path):
    server = BatonServer(own_database, tmp_path, BATON_LOG_FORMAT="json", BATON_LOG_LEVEL="INFO").start()
    try:
        api = server.api(server.create_tenant("logs"))
        deployed = requests.post(server.base_url + "/v1/rpc", timeout=30, headers={
            "X-API-Key": api.key, "X-Request-Id": "deploy-42"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "definition.deploy",
            "params": {"bpmn": bpmn("failing_script.bpmn"), "code": "logged"}}).json()["result"]
        instance_id = api.call("process.start", definition_id="logged", variables={"divisor": 0})["instance_id"]
        assert api.wait_for(instance_id)["status"] == "failed"
        api.wait_until_idle()
    finally:
        server.stop()
    records = log_records(server.output())
    [deploy] = [r for r in records if r["message"].startswith("deployed logged version 1")]
    assert deploy["request_id"] == "deploy-42" and deploy["logger"] == "baton.definitions"
    tenant_id = deploy["tenant_id"]
    assert isinstance(tenant_id, int) and "job_id" not in deploy
    assert f"(definition {deployed['definition_id']})" in deploy["message"]
    [ended] = [r for r in records if r["message"] == f"instance {instance_id} of logged failed at divide"]
    assert (ended["tenant_id"], ended["instance_id"], ended["level"]) == (tenant_id, instance_id, "INFO")
    assert isinstance(ended["job_id"], int) and "request_id" not in ended
    assert any(r["logger"] == "waitress" for r in records)  # the libraries' lines are JSON too


def test_plain_text_stays_the_default(database_url, tmp_path):
    server = BatonServer(database_url, tmp_path, BATON_LOG_LEVEL="INFO").start()
    try:
        api = server.api(server.create_tenant("text-logs"))
        api.deploy(bpmn("failing_script.bpmn"), code="text-logged")
    finally:
        server.stop()
    lines = server.output().splitlines()
    assert any(TEXT_LOG_LINE.match(line) and "deployed text-logged version 1" in line for line in lines)
    assert not [line for line in lines if line.startswith("{")]


def test_a_burst_of_requests_logs_no_line_per_queued_request(database_url, tmp_path):
    """waitress warned "Task queue depth is N" for every request that found its eight HTTP threads
    busy: one line per request under a burst (3,149 for 4,000 webhook starts from 16 clients),
    written by its one I/O thread. Queueing for a thread is normal under load, not a warning."""
    server = BatonServer(database_url, tmp_path, BATON_LOG_LEVEL="INFO").start()
    try:
        api = server.api(server.create_tenant("burst-logs"))
        [route] = api.deploy(bpmn("webhook_order.bpmn"), code="burst-logged")["webhooks"]

        def client(_: int) -> list[int]:
            with requests.Session() as session:
                return [session.post(route["url"], json={"amount": 1}, timeout=30).status_code for _ in range(25)]

        with ThreadPoolExecutor(24) as pool:  # three times the HTTP threads
            statuses = [status for answers in pool.map(client, range(24)) for status in answers]
        assert statuses == [202] * 600
    finally:
        server.stop()
    output = server.output()
    assert "Baton listening" in output and "Task queue depth" not in output
