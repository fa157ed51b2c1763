"""The PostgreSQL topology with gunicorn (two web processes, no configuration for metrics): every
process counts into one directory named after gunicorn's master, so any process's ``/metrics``
shows the requests both served; and a key's rate limit is one limit across the processes."""
from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from tests.harness import ROOT, BatonServer, free_port
from tests.integration.test_metrics import scrape
from tests.integration.test_rate_limits import Kept, burst, rpc

PER_KEY = 3


@pytest.fixture
def gunicorn(own_database, tmp_path):
    port = free_port()
    env = {name: value for name, value in os.environ.items()
           if name not in ("PROMETHEUS_MULTIPROC_DIR", "BATON_METRICS_DIR_MADE")}
    env.update(DATABASE_URL=own_database, BATON_WORKERS="0", BATON_RATE_LIMIT_PER_KEY=str(PER_KEY),
               PYTHONUNBUFFERED="1")
    log = open(tmp_path / "gunicorn.log", "w")
    process = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}",
                                "app:create_server_app()"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "gunicorn.log").read_text()
            try:
                if requests.get(base_url + "/readyz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, (tmp_path / "gunicorn.log").read_text()
            time.sleep(0.2)
        yield process, base_url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_two_gunicorn_processes_share_metrics_and_rate_limits(backend, own_database, tmp_path, gunicorn):
    process, base_url = gunicorn
    key = BatonServer(own_database, tmp_path).create_tenant("gunicorn")

    sent = Kept(rpc(base_url, key))
    answers = burst(sent, PER_KEY + 5)  # a new connection each
    assert [a.status_code for a in answers] == [200] * PER_KEY + [429] * 5

    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # busy processes: both take requests
        statuses = list(pool.map(lambda _: requests.get(base_url + "/healthz", timeout=10).status_code, range(60)))
    assert statuses == [200] * 60

    directory = Path(tempfile.gettempdir()) / f"baton-metrics-{os.getuid()}" / str(process.pid)
    pids = {int(name.rsplit("_", 1)[1].split(".")[0]) for name in os.listdir(directory) if name.startswith("counter_")}
    assert len(pids) == 2 and process.pid not in pids  # the two web processes, not the master
    for _ in range(4):  # whichever process answers the scrape, it reads both processes' files
        counted = scrape(base_url)
        assert counted['baton_http_requests_total{method="GET",route="/healthz",status="200"}'] == 60
        assert counted['baton_http_requests_total{method="POST",route="/v1/rpc",status="429"}'] == sent.count(429)
        assert counted['baton_rate_limited_total{limit="api_key"}'] == sent.count(429) >= 5
