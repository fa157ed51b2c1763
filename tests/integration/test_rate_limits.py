"""Rate limits through a real server (SQLite and PostgreSQL): per API key on JSON-RPC and web-chat,
per webhook on both webhook doors (the thin WSGI door and Flask's route for a chunked body);
429 with ``Retry-After`` in the endpoint's own error shape, counted in ``/metrics``."""
from __future__ import annotations

import time

import pytest
import requests

from tests.conftest import BACKENDS
from tests.harness import BatonServer, bpmn
from tests.integration.test_metrics import moved, scrape

PER_KEY, PER_WEBHOOK = 3, 2


@pytest.fixture(scope="module", params=BACKENDS)
def limited(request, tmp_path_factory):
    from tests.conftest import make_database_url
    from tests.harness import drop_postgres_database

    url = make_database_url(request.param, tmp_path_factory)
    server = BatonServer(url, tmp_path_factory.mktemp("limited"), BATON_RATE_LIMIT_PER_KEY=str(PER_KEY),
                         BATON_RATE_LIMIT_PER_WEBHOOK=str(PER_WEBHOOK)).start()
    yield server
    server.stop()
    if request.param == "postgresql":
        drop_postgres_database(url)


def burst(send, count: int) -> list[requests.Response]:
    """``count`` requests inside one clock second (started right after a second begins; tried again
    when the machine was too slow to fit them in one)."""
    for _ in range(5):
        time.sleep(1.02 - time.time() % 1)
        began = time.time()
        answers = [send() for _ in range(count)]
        if int(time.time()) == int(began):
            return answers
    raise AssertionError("could not send the burst within one second")


class Kept:
    """A send function that keeps every answer it got, from every try of a ``burst``: what the
    server counted in its metrics, a burst tried again included."""

    def __init__(self, send):
        self.send = send
        self.answers: list[requests.Response] = []

    def __call__(self) -> requests.Response:
        answer = self.send()
        self.answers.append(answer)
        return answer

    def count(self, status: int) -> int:
        return sum(answer.status_code == status for answer in self.answers)


def rpc(base_url: str, key: str):
    return lambda: requests.post(base_url + "/v1/rpc", headers={"X-API-Key": key}, timeout=10,
                                 json={"jsonrpc": "2.0", "method": "process.list", "id": 7})


def test_a_key_over_its_rate_gets_429_in_json_rpc_shape_with_retry_after(limited):
    key = limited.create_tenant("rate-key")
    before = scrape(limited.base_url)
    sent = Kept(rpc(limited.base_url, key))
    answers = burst(sent, PER_KEY + 3)
    assert [a.status_code for a in answers] == [200] * PER_KEY + [429] * 3
    refused = answers[-1]
    assert refused.headers["Retry-After"] == "1"
    assert refused.json() == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32603, "message": "Too many requests for this API key; try again in 1 s.",
        "data": {"reason": "too_many_requests", "retry_after_s": 1}}}
    time.sleep(1.02 - time.time() % 1)
    assert rpc(limited.base_url, key)().status_code == 200  # the next second has its own allowance
    after = scrape(limited.base_url)
    assert moved(before, after, 'baton_rate_limited_total{limit="api_key"}') == sent.count(429) >= 3
    assert moved(before, after, 'baton_http_requests_total{method="POST",route="/v1/rpc",status="429"}') == \
        sent.count(429)


def test_each_key_has_its_own_allowance_and_web_chat_counts_against_it(limited):
    first, second = limited.create_tenant("rate-a"), limited.create_tenant("rate-b")
    send_first, send_second = rpc(limited.base_url, first), rpc(limited.base_url, second)

    def both():
        return send_first(), send_second()

    answers = burst(both, PER_KEY)
    assert all(a.status_code == 200 for pair in answers for a in pair)

    def chat_then_rpc():
        return requests.post(limited.base_url + "/channels/webchat/1/inbound", headers={"X-API-Key": first},
                             json={"chat_id": "c", "text": "hi"}, timeout=10)

    chats = burst(chat_then_rpc, PER_KEY + 1)
    assert [a.status_code for a in chats][-1] == 429  # the web-chat door counts the key too
    assert chats[-1].json()["error"]["code"] == "too_many_requests"
    assert chats[-1].headers["Retry-After"] == "1"


def test_a_webhook_over_its_rate_gets_429_at_both_doors(limited):
    key = limited.create_tenant("rate-hook")
    api = limited.api(key)
    hook = api.deploy(bpmn("webhook_order.bpmn"), code="limited")["webhooks"][0]["url"]
    before = scrape(limited.base_url)
    plain = Kept(lambda: requests.post(hook, json={"amount": 1}, timeout=10))
    answers = burst(plain, PER_WEBHOOK + 2)
    assert [a.status_code for a in answers] == [202] * PER_WEBHOOK + [429] * 2
    assert answers[-1].json() == {"error": {"code": "too_many_requests",
                                            "message": "Too many requests for this webhook; try again in 1 s."}}
    assert answers[-1].headers["Retry-After"] == "1"

    def chunked():  # no Content-Length: Flask's route takes it, not the thin door
        return requests.post(hook, data=iter([b'{"amount":', b' 2}']), timeout=10,
                             headers={"Content-Type": "application/json"})

    chunks = Kept(chunked)
    answers = burst(chunks, PER_WEBHOOK + 1)
    assert [a.status_code for a in answers] == [202] * PER_WEBHOOK + [429]
    assert answers[-1].headers["Retry-After"] == "1"
    api.wait_until_idle()
    after = scrape(limited.base_url)
    refused = plain.count(429) + chunks.count(429)
    assert moved(before, after, 'baton_rate_limited_total{limit="webhook"}') == refused >= 3
    assert moved(before, after, 'baton_webhook_refusals_total{reason="too_many_requests"}') == refused
    assert after['baton_instances_ended_total{code="limited",status="completed"}'] == \
        plain.count(202) + chunks.count(202) >= 2 * PER_WEBHOOK


def test_without_the_settings_nothing_is_limited(server, api):
    before = scrape(server.base_url)
    for _ in range(30):
        api.call("process.list")
    after = scrape(server.base_url)
    assert not [name for name in after if name.startswith("baton_rate_limited_total") and after[name]]
    assert moved(before, after, 'baton_http_requests_total{method="POST",route="/v1/rpc",status="200"}') == 30
