"""The default ``serve`` on two cores or more: granian's processes, each serving HTTP and running
its own engine threads (``BATON_SERVE_PROCESSES``, ``channels/http_server.py``), over real HTTP.

The serving processes are found in /proc (children of the server started by multiprocessing's
spawn). One is killed with SIGKILL in the middle of a burst of webhook starts: granian starts a new
one, and every start (sent with an Idempotency-Key, sent again when its connection broke) completes
exactly once. When the server itself is killed, the kernel tells its serving processes (their
parent-death signal) and they stop: the port is free for the next server, which finishes what the
first accepted. The processes count into one rate limit and one set of metrics.
"""
from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import requests
from sqlalchemy import create_engine, text

from tests.conftest import BACKENDS
from tests.harness import ROOT, BatonServer, alive, bpmn, child_processes, eventually, free_port
from tests.integration.test_metrics import scrape
from tests.integration.test_rate_limits import burst

pytestmark = pytest.mark.slow  # servers of several processes

CALLS = 200
KILL_AFTER = 60


def serving_processes(server_pid: int) -> list[int]:
    return child_processes(server_pid, b"spawn_main")  # not multiprocessing's resource tracker


def statuses(database_url: str) -> list[tuple[int, str]]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text("SELECT id, status FROM instances ORDER BY id"))]
    finally:
        engine.dispose()


def start_once(url: str, seq: int) -> int:
    """A webhook start that survives a broken connection: the same Idempotency-Key again."""
    for _ in range(10):
        try:
            response = requests.post(url, json={"amount": 60, "seq": seq}, timeout=60,
                                     headers={"Idempotency-Key": f"seq-{seq}"})
        except requests.ConnectionError:
            time.sleep(0.2)
            continue
        assert response.status_code == 202, response.text
        return response.json()["instance_id"]
    raise AssertionError(f"start {seq} never answered")


def test_the_default_start_serves_from_one_process_per_core(tmp_path):
    """No BATON_WORKER_PROCESSES nor BATON_SERVE_PROCESSES: one serving process per core from two
    cores on (on one core, waitress in the server itself), and an instance completes."""
    from engine.jobs.processes import default_count

    expected = default_count(os.cpu_count() or 1)
    server = BatonServer(f"sqlite:///{tmp_path / 'default.db'}", tmp_path, BATON_WORKER_PROCESSES="")
    try:
        server.start()
        assert len(serving_processes(server.process.pid)) == expected
        api = server.api(server.create_tenant("default-topology"))
        url = api.deploy(bpmn("webhook_order.bpmn"))["webhooks"][0]["url"]
        started = requests.post(url, json={"amount": 60}, timeout=10).json()
        assert api.wait_for(started["instance_id"])["status"] == "completed"
    finally:
        server.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_serving_process_is_replaced_and_no_start_is_lost(backend, own_database, tmp_path):
    server = BatonServer(own_database, tmp_path, BATON_WORKER_PROCESSES="", BATON_SERVE_PROCESSES="2",
                         BATON_JOB_LEASE_S="2")
    try:
        server.start()
        key = server.create_tenant("sp")
        url = server.api(key).deploy(bpmn("webhook_order.bpmn"), code="sp")["webhooks"][0]["url"]
        children = serving_processes(server.process.pid)
        assert len(children) == 2
        answered: dict[int, int] = {}
        killed: list[int] = []

        def start(seq: int):
            answered[seq] = start_once(url, seq)
            if len(answered) >= KILL_AFTER and not killed:
                killed.append(children[0])
                os.kill(children[0], signal.SIGKILL)

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for future in [pool.submit(start, seq) for seq in range(CALLS)]:
                future.result()
        assert killed and len(answered) == CALLS
        replaced = eventually(lambda: (lambda now: len(now) == 2 and killed[0] not in now and now)(
            serving_processes(server.process.pid)), 30, "a new serving process")
        assert children[1] in replaced  # the other one was left alone
        eventually(lambda: [status for _, status in statuses(own_database)] == ["completed"] * CALLS, 120,
                 "every instance completed")
        assert [row_id for row_id, _ in statuses(own_database)] == sorted(answered.values())  # one each
    finally:
        server.stop()


def test_a_killed_server_takes_its_serving_processes_along_and_the_next_one_finishes_its_work(tmp_path):
    database = f"sqlite:///{tmp_path / 'killed.db'}"
    # The first server accepts but runs no job (no engine threads): the second must run them.
    first = BatonServer(database, tmp_path / "first", BATON_WORKER_PROCESSES="", BATON_SERVE_PROCESSES="2",
                        BATON_WORKERS="0")
    (tmp_path / "first").mkdir()
    second = None
    try:
        first.start()
        key = first.create_tenant("killed")
        url = first.api(key).deploy(bpmn("webhook_order.bpmn"), code="killed")["webhooks"][0]["url"]
        children = serving_processes(first.process.pid)
        ids = [start_once(url, seq) for seq in range(20)]
        first.kill()  # SIGKILL: no clean-up in the server
        eventually(lambda: not any(alive(pid) for pid in children), 30, "the serving processes to exit")
        with socket.socket() as probe:  # nothing holds the port any more
            probe.bind(("127.0.0.1", first.port))
        second = BatonServer(database, tmp_path, BATON_WORKER_PROCESSES="", BATON_SERVE_PROCESSES="2")
        second.start()
        eventually(lambda: statuses(database) == [(i, "completed") for i in ids], 60, "the accepted starts to complete")
    finally:
        first.stop()
        for pid in serving_processes(first.process.pid) if first.process else []:
            os.kill(pid, signal.SIGKILL)
        if second is not None:
            second.stop()


def test_sigterm_stops_the_serving_processes_and_the_server_exits_0(tmp_path):
    server = BatonServer(f"sqlite:///{tmp_path / 'term.db'}", tmp_path, BATON_WORKER_PROCESSES="",
                         BATON_SERVE_PROCESSES="2")
    try:
        server.start()
        children = serving_processes(server.process.pid)
        assert len(children) == 2
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
        assert not any(alive(pid) for pid in children)
    finally:
        server.stop()


def test_ctrl_c_at_a_terminal_stops_the_server_and_its_processes_once(tmp_path):
    """Ctrl-C sends SIGINT to the terminal's whole foreground process group: the serving processes
    are in groups of their own, so only the server gets it and stops each of them (a serving process
    signalled twice hung)."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'ctrl-c.db'}", "BATON_WORKER_PROCESSES": "",
           "BATON_SERVE_PROCESSES": "2", "BATON_SECRET_KEY_FILE": str(tmp_path / "secret.key")}
    with open(tmp_path / "ctrl-c.log", "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "flask", "--app", "app", "serve", "--port", str(port)],
                                  cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        eventually(lambda: len(serving_processes(server.pid)) == 2 and _answers(port), 60, "the server to serve")
        children = serving_processes(server.pid)
        assert all(os.getpgid(pid) == pid != os.getpgid(server.pid) for pid in children)  # not the terminal's group
        os.killpg(server.pid, signal.SIGINT)  # as the terminal does
        assert server.wait(30) == 0, (tmp_path / "ctrl-c.log").read_text()[-3000:]
        assert not any(alive(pid) for pid in children)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)


def _answers(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture
def two_processes(tmp_path):
    server = BatonServer(f"sqlite:///{tmp_path / 'shared.db'}", tmp_path, BATON_WORKER_PROCESSES="",
                         BATON_SERVE_PROCESSES="2", BATON_RATE_LIMIT_PER_WEBHOOK="4").start()
    yield server
    server.stop()


def test_the_processes_count_into_one_rate_limit_and_one_set_of_metrics(two_processes):
    server = two_processes
    api = server.api(server.create_tenant("shared"))
    url = api.deploy(bpmn("webhook_order.bpmn"), code="shared")["webhooks"][0]["url"]

    def fresh_connection():  # each on a connection of its own: the kernel spreads them over the processes
        with requests.Session() as session:
            return session.post(url, json={"amount": 60}, headers={"Connection": "close"}, timeout=10)

    answers = burst(fresh_connection, 12)
    assert [a.status_code for a in answers].count(202) == 4, [a.status_code for a in answers]
    assert {a.status_code for a in answers} == {202, 429}
    accepted = [a.json()["instance_id"] for a in answers if a.status_code == 202]
    for instance_id in accepted:
        assert api.wait_for(instance_id)["status"] == "completed"
    # Whichever process answers /metrics (a new connection each time), it sums both processes.
    for _ in range(6):
        assert scrape(server.base_url)['baton_instances_started_total{code="shared"}'] == 4


def test_a_request_the_http_server_cannot_parse_gets_400_and_the_server_goes_on(two_processes):
    for request in (b"POST /v1/rpc HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
                    b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", two_processes.port), timeout=10) as connection:
            connection.sendall(request)
            answer = connection.recv(4096)
        assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert requests.get(two_processes.base_url + "/healthz", timeout=10).json() == {"status": "ok"}
