"""``BATON_LOG_FORMAT=json``: the server's stderr is one JSON object per log line, carrying the
request id and tenant of a request, and the job, instance and tenant of a job; the default stays
plain text for a person at a terminal."""
from __future__ import annotations

import json
import re

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
