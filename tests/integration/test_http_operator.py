"""serviceTask operator = http, end to end against a real local receiver."""
from __future__ import annotations

import json

import pytest

from tests.harness import bpmn
from tests.receiver import Answer, Receiver


@pytest.fixture
def receiver():
    started = Receiver(Answer(200, {"status": "ok", "id": "crm-1"})).start()
    yield started
    started.stop()


@pytest.fixture
def start_call(api, unique_code, receiver):
    api.deploy(bpmn("http_call.bpmn"), code=unique_code)

    def start(**variables):
        variables = {"base": receiver.url, "order_id": 42, "note": "Zoë", "token": "t0k", **variables}
        return api.call("process.start", definition_id=unique_code, variables=variables)["instance_id"]
    return start


def test_call_renders_templates_and_stores_the_json_answer(api, receiver, start_call):
    instance_id = start_call()
    status = api.wait_for(instance_id)
    assert status["status"] == "completed"
    assert status["variables"]["reply"] == {"status": "ok", "id": "crm-1"}
    [request] = receiver.requests
    assert (request.method, request.path) == ("POST", "/orders/42")
    assert request.headers["X-Token"] == "t0k"
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.body) == {"order": 42, "note": "Zoë"}


def test_5xx_is_retried_then_succeeds(api, receiver, start_call):
    receiver.script(Answer(503, {"error": "busy"}), Answer(500))
    instance_id = start_call()
    status = api.wait_for(instance_id)
    assert status["status"] == "completed" and status["variables"]["reply"]["status"] == "ok"
    assert len(receiver.requests) == 3


def test_failure_after_retries_fails_the_instance_with_the_status_and_retry_calls_again(api, receiver, start_call):
    receiver.script(Answer(502), Answer(502), Answer(502))
    instance_id = start_call()
    status = api.wait_for(instance_id)
    assert status["status"] == "failed"
    assert status["error"]["element_id"] == "call_crm" and "502" in status["error"]["message"]
    assert len(receiver.requests) == 3  # the first call and two retries

    api.call("process.retry", instance_id=instance_id)
    status = api.wait_for(instance_id)
    assert status["status"] == "completed" and len(receiver.requests) == 4


def test_4xx_is_not_retried(api, receiver, start_call):
    receiver.script(Answer(404, {"error": "no such order"}))
    status = api.wait_for(start_call())
    assert status["status"] == "failed" and "404" in status["error"]["message"]
    assert "/orders" not in status["error"]["message"]  # paths can hold tokens: never shown
    assert len(receiver.requests) == 1


def test_timeout_is_retried(api, receiver, start_call):
    receiver.script(Answer(200, {"status": "late"}, delay_s=1.5))
    status = api.wait_for(start_call(), timeout=30)
    assert status["status"] == "completed" and status["variables"]["reply"]["status"] == "ok"
    assert len(receiver.requests) == 2


def test_cancel_during_a_slow_call_wins(api, receiver, start_call):
    receiver.script(Answer(200, {"status": "ok"}, delay_s=0.8))
    instance_id = start_call()
    receiver.wait_for(1)
    assert api.call("process.cancel", instance_id=instance_id)["status"] == "cancelled"
    api.wait_until_idle()  # the slow call has answered and its result was dropped
    assert api.call("process.status", instance_id=instance_id)["status"] == "cancelled"


def test_private_address_is_refused_unless_allowed(backend, tmp_path_factory, tmp_path, receiver):
    """The SSRF guard: with private URLs not allowed, a call to 127.0.0.1 fails the instance, unsent.

    Its own database: a server sharing one would run this instance's jobs with its own settings.
    """
    from tests.conftest import make_database_url
    from tests.harness import BatonServer, drop_postgres_database

    database_url = make_database_url(backend, tmp_path_factory)
    guarded = BatonServer(database_url, tmp_path, BATON_ALLOW_PRIVATE_URLS="0").start()
    try:
        api = guarded.api(guarded.create_tenant(f"ssrf-{tmp_path.name[-8:]}"))
        api.deploy(bpmn("http_call.bpmn"), code="ssrf-check")
        instance_id = api.call("process.start", definition_id="ssrf-check", variables={
            "base": receiver.url, "order_id": 1, "note": "", "token": ""})["instance_id"]
        status = api.wait_for(instance_id)
        assert status["status"] == "failed" and status["error"]["element_id"] == "call_crm"
        assert "not allowed" in status["error"]["message"] or "refused" in status["error"]["message"]
        assert receiver.requests == []
    finally:
        guarded.stop()
        if backend == "postgresql":
            drop_postgres_database(database_url)
