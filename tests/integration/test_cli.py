"""The command line and first start: tenants, keys, and the default tenant of the embedded default."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import requests

from tests.harness import ROOT, BatonServer, free_port


def test_tenant_create_prints_the_key_alone_on_the_last_line(server):
    result = server.command("tenant", "create", "cli-acme")
    assert result.returncode == 0, result.stderr
    key = result.stdout.strip().splitlines()[-1]
    assert key.startswith("bt_") and " " not in key
    assert server.api(key).call("definition.list")["total"] == 0


def test_tenant_create_refuses_a_duplicate_name(server):
    server.command("tenant", "create", "cli-twice")
    again = server.command("tenant", "create", "cli-twice")
    assert again.returncode != 0
    assert "already exists" in again.stderr and "Traceback" not in again.stderr


@pytest.mark.parametrize("topology", [{"BATON_WORKER_PROCESSES": ""}, {"BATON_WORKER_PROCESSES": "0"}],
                         ids=["serving-processes", "one-process"])
def test_serve_on_a_taken_port_says_so_in_one_line_and_exits_1(tmp_path, topology):
    port = free_port()
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = subprocess.run([sys.executable, "-m", "flask", "--app", "app", "serve", "--port", str(port)],
                                cwd=ROOT, capture_output=True, text=True, timeout=60,
                                env={**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'taken.db'}",
                                     "BATON_SECRET_KEY_FILE": str(tmp_path / "secret.key"), **topology})
    assert result.returncode == 1
    assert f"Error: Cannot listen on 127.0.0.1:{port}: Address already in use." in result.stderr
    assert "Traceback" not in result.stderr and "panicked" not in result.stderr


def test_first_start_creates_default_tenant_and_prints_its_key_once(tmp_path):
    database_url = f"sqlite:///{tmp_path / 'fresh.db'}"
    first = BatonServer(database_url, tmp_path).start()
    try:
        output = first.output()
        key = output.split("(shown once):", 1)[1].split()[0]
        assert first.api(key).call("apikey.list")["items"][0]["permissions"] == ["*"]
    finally:
        first.stop()
    second = BatonServer(database_url, tmp_path).start()
    try:
        second.stop()
        assert "(shown once)" not in second.output()  # the tenant exists: no new key is printed
    finally:
        second.stop()


def test_flask_run_with_reloader_starts_workers_once(tmp_path):
    """``flask run --debug`` forks a reloader; the job still runs exactly once and the server answers."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'run.db'}",
           "BATON_PUBLIC_URL": f"http://127.0.0.1:{port}"}
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "flask", "--app", "app", "run", "--debug",
                                    "--port", str(port)], cwd=ROOT, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if requests.get(base + "/healthz", timeout=1).ok:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        text = log.read_text()
        assert text.count("(shown once)") == 1, text
        key = text.split("(shown once):", 1)[1].split()[0]
        from tests.harness import Api, bpmn

        api = Api(base, key)
        api.deploy(bpmn("webhook_order.bpmn"), code="run-check")
        instance_id = api.call("process.start", definition_id="run-check", variables={"amount": 9})["instance_id"]
        assert api.wait_for(instance_id)["variables"]["total"] == 18
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
