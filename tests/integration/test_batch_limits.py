"""A batch never holds SQLite's write lock from call to call: webhook starts made while big batches
of ``task.list`` run wait for one call at most, not for the batch (ratio against the batch's own
duration, measured in the same test)."""
from __future__ import annotations

import statistics
import threading
import time

import pytest
import requests

from tests.harness import bpmn
from tests.integration.test_tasks import open_task

pytestmark = pytest.mark.slow
TASKS = 100


def test_a_big_batch_does_not_stall_a_concurrent_start(api, unique_code):
    url = api.deploy(bpmn("camunda_profile.bpmn"), code=unique_code)["webhooks"][0]["url"]
    last = None
    for n in range(TASKS):
        last = requests.post(url, json={"n": n, "note": "x" * 200}, timeout=30).json()["instance_id"]
    open_task(api, last)
    api.wait_until_idle()
    batch = [{"jsonrpc": "2.0", "method": "task.list", "params": {"per_page": 100, "page": 1 + i % 2},
              "id": i} for i in range(100)]
    started = time.perf_counter()
    answers = api.post(batch).json()
    batch_s = time.perf_counter() - started  # the baseline: one whole batch, alone
    assert len(answers) == 100 and all("result" in a for a in answers)

    stop = threading.Event()

    def keep_batching():
        with requests.Session() as session:
            while not stop.is_set():
                session.post(api.base_url + api.path, json=batch, headers={"X-API-Key": api.key}, timeout=60)

    loaders = [threading.Thread(target=keep_batching) for _ in range(2)]  # always a batch under way
    for loader in loaders:
        loader.start()
    latencies = []
    try:
        time.sleep(batch_s / 4)  # a batch is under way
        with requests.Session() as session:
            for n in range(20):
                began = time.perf_counter()
                assert session.post(url, json={"during": n}, timeout=60).status_code == 202
                latencies.append(time.perf_counter() - began)
    finally:
        stop.set()
        for loader in loaders:
            loader.join()
    # Before each call ended its own transaction, a start waited for the rest of the batch (about
    # half of it on average); now it waits for one call, shares the CPU with the batch's thread.
    assert statistics.median(latencies) < 0.25 * batch_s, (latencies, batch_s)
