"""``/metrics`` of a real server (SQLite and PostgreSQL) read with Prometheus' own parser: the
counters move where the events happen (a start, a failure, a cancel, a delivery, a refused webhook,
the requests themselves), and with ``BATON_WORKER_PROCESSES=2`` the children's counters are in the
server's answer (the server runs no engine thread of its own)."""
from __future__ import annotations

import re
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import BACKENDS
from tests.harness import BatonServer, alive, bpmn, eventually
from tests.integration.test_tasks import open_task
from tests.integration.test_worker_processes import worker_children
from tests.receiver import Receiver

WEBHOOK_ROUTE = "/webhooks/inbound/<webhook_id>"


def scrape(base_url: str) -> dict[str, float]:
    """Every sample as ``name{label="value",...}`` (labels sorted) -> value."""
    response = requests.get(base_url + "/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    values = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def moved(before: dict, after: dict, name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def test_a_webhook_start_counts_the_instance_its_advance_and_the_request(server, api, unique_code):
    hook = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)["webhooks"][0]["url"]
    before = scrape(server.base_url)
    answer = requests.post(hook, json={"amount": 70}, headers={"X-Request-Id": "order-70"}, timeout=10)
    assert answer.status_code == 202 and answer.headers["X-Request-Id"] == "order-70"
    api.wait_for(answer.json()["instance_id"])
    api.wait_until_idle()
    after = scrape(server.base_url)
    assert moved(before, after, f'baton_instances_started_total{{code="{unique_code}"}}') == 1
    assert moved(before, after, f'baton_instances_ended_total{{code="{unique_code}",status="completed"}}') == 1
    assert moved(before, after, 'baton_advance_duration_seconds_count{kind="start"}') >= 1
    assert moved(before, after, f'baton_http_requests_total{{method="POST",route="{WEBHOOK_ROUTE}",status="202"}}') == 1
    assert moved(before, after, f'baton_http_request_duration_seconds_count{{route="{WEBHOOK_ROUTE}"}}') == 1
    assert after['baton_jobs_due{}'] == 0 and after['baton_jobs_running{}'] == 0
    assert after['baton_instances{status="completed"}'] >= 1


def test_a_failed_and_a_cancelled_instance_are_counted_by_code(server, api, unique_code):
    failing, waiting = unique_code + "-fails", unique_code + "-waits"
    api.deploy(bpmn("failing_script.bpmn"), code=failing)
    api.deploy(bpmn("wait_for_person.bpmn"), code=waiting)
    before = scrape(server.base_url)
    failed = api.call("process.start", definition_id=failing, variables={"divisor": 0})["instance_id"]
    assert api.wait_for(failed)["status"] == "failed"
    cancelled = api.call("process.start", definition_id=waiting, variables={"order": 1})["instance_id"]
    open_task(api, cancelled)
    api.call("process.cancel", instance_id=cancelled)
    api.wait_until_idle()
    after = scrape(server.base_url)
    assert moved(before, after, f'baton_instances_ended_total{{code="{failing}",status="failed"}}') == 1
    assert moved(before, after, f'baton_instances_ended_total{{code="{waiting}",status="cancelled"}}') == 1
    assert moved(before, after, f'baton_instances_started_total{{code="{waiting}"}}') == 1
    assert moved(before, after, 'baton_script_duration_seconds_count{outcome="error"}') >= 1
    assert moved(before, after, 'baton_http_requests_total{method="POST",route="/v1/rpc",status="200"}') >= 5


def test_a_delivery_and_a_refused_webhook_are_counted(server, api, unique_code):
    crm = Receiver().start()
    try:
        xml = bpmn("approval_form.bpmn").replace(
            '<camunda:property name="buttons" value="approve,reject" />',
            '<camunda:property name="buttons" value="approve,reject" />'
            f'<camunda:property name="crm_webhook" value="{crm.url}/crm/events" />')
        api.deploy(xml, code=unique_code)
        before = scrape(server.base_url)
        api.call("process.start", definition_id=unique_code, variables={"customer": "Zoë", "order": 17})
        crm.wait_for(1)
        api.wait_until_idle()
    finally:
        crm.stop()
    refused = requests.post(server.base_url + "/webhooks/inbound/no-such-hook", json={}, timeout=10)
    assert refused.status_code == 404
    after = scrape(server.base_url)
    assert moved(before, after, 'baton_delivery_attempts_total{outcome="sent"}') >= 1
    assert moved(before, after, 'baton_delivery_latency_seconds_count{}') >= 1
    assert moved(before, after, 'baton_webhook_refusals_total{reason="not_found"}') == 1
    assert moved(before, after, f'baton_http_requests_total{{method="POST",route="{WEBHOOK_ROUTE}",status="404"}}') == 1


def test_openmetrics_is_answered_when_the_scraper_asks_for_it(server):
    response = requests.get(server.base_url + "/metrics", timeout=10,
                            headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"})
    assert response.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert response.text.rstrip().endswith("# EOF")
    assert re.search(r"^baton_jobs_due \d", response.text, re.MULTILINE)


def test_an_unusable_request_id_is_replaced_and_unknown_paths_share_one_label(server):
    before = scrape(server.base_url)
    for path in ("/nothing/1", "/nothing/2", "/nothing/3"):
        answer = requests.get(server.base_url + path, headers={"X-Request-Id": "bad id\twith spaces"}, timeout=10)
        assert answer.status_code == 404
        assert answer.headers["X-Request-Id"] != "bad id\twith spaces"
        assert len(answer.headers["X-Request-Id"]) == 16
    answer = requests.request("BREW", server.base_url + "/healthz", timeout=10)
    after = scrape(server.base_url)
    assert moved(before, after, 'baton_http_requests_total{method="GET",route="unmatched",status="404"}') == 3
    assert moved(before, after, f'baton_http_requests_total{{method="other",route="/healthz",status="{answer.status_code}"}}') \
        + moved(before, after, f'baton_http_requests_total{{method="other",route="unmatched",status="{answer.status_code}"}}') == 1
    assert not [name for name in after if "/nothing/" in name or "BREW" in name]


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_processes_count_into_the_servers_metrics(backend, own_database, tmp_path):
    server = BatonServer(own_database, tmp_path, BATON_WORKER_PROCESSES="2", BATON_WORKERS="1").start()
    try:
        api = server.api(server.create_tenant("metrics"))
        hook = api.deploy(bpmn("webhook_order.bpmn"), code="counted")["webhooks"][0]["url"]
        children = eventually(lambda: len(worker_children(server.process.pid)) == 2 and
                            worker_children(server.process.pid), 30, "two worker processes")
        for amount in range(3):
            assert requests.post(hook, json={"amount": amount}, timeout=10).status_code == 202
        api.wait_until_idle()
        counted = scrape(server.base_url)
        # Only the children run the engine: these counts can only have come from their files.
        assert counted['baton_instances_started_total{code="counted"}'] == 3
        assert counted['baton_instances_ended_total{code="counted",status="completed"}'] == 3
        assert counted['baton_advance_duration_seconds_count{kind="start"}'] == 3

        # A child that dies keeps its counts: its files stay, the sum never goes down.
        import os
        import signal
        os.kill(children[0], signal.SIGKILL)
        eventually(lambda: not alive(children[0]) and len(worker_children(server.process.pid)) == 2, 30,
                 "a new worker process")
        assert requests.post(hook, json={"amount": 9}, timeout=10).status_code == 202
        api.wait_until_idle()
        deadline = time.monotonic() + 20
        while scrape(server.base_url).get('baton_instances_ended_total{code="counted",status="completed"}') != 4:
            assert time.monotonic() < deadline, scrape(server.base_url)
            time.sleep(0.1)
        assert scrape(server.base_url)['baton_instances_started_total{code="counted"}'] == 4
    finally:
        server.stop()
