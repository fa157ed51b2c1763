"""``BATON_METRICS_TOKEN`` (issue 29): when set, ``/metrics`` answers only a bearer of that token (a 401
JSON error otherwise: its labels carry every tenant's process codes); unset, it stays open (the
session's server, scraped by the other tests)."""
from __future__ import annotations

import uuid

import requests

from tests.harness import BatonServer, bpmn


def test_metrics_behind_a_token_answer_only_its_bearer(own_database, tmp_path):
    token = "metrics-" + uuid.uuid4().hex
    server = BatonServer(own_database, tmp_path, BATON_METRICS_TOKEN=token).start()
    try:
        api = server.api(server.create_tenant(f"m-{uuid.uuid4().hex[:8]}"))
        api.deploy(bpmn("webhook_order.bpmn"), code="secret-process-code")
        url = server.base_url + "/metrics"
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {token}"},
                        {"Authorization": f"Bearer {token}x"}, {"Authorization": "Bearer"}):
            refused = requests.get(url, headers=headers, timeout=10)
            assert refused.status_code == 401, headers
            assert refused.headers["Content-Type"].startswith("application/json")
            assert refused.headers["WWW-Authenticate"].startswith("Bearer")
            assert refused.json()["error"]["code"] == "unauthorized"
            assert "baton_" not in refused.text and token not in refused.text
        answered = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert answered.status_code == 200 and "baton_jobs_due" in answered.text
        assert requests.get(server.base_url + "/healthz", timeout=10).status_code == 200  # probes stay open
    finally:
        server.stop()


def test_metrics_without_a_token_stay_open(server):
    assert requests.get(server.base_url + "/metrics", timeout=10).status_code == 200
