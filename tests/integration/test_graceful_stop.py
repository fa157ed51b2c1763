"""SIGTERM with a job in flight (SQLite and PostgreSQL): the server (`flask --app app serve`, its
workers as threads, as supervised processes, or in its serving processes) or a `flask worker` stops
claiming, lets the job finish within BATON_SHUTDOWN_GRACE_S, releases it when it cannot, and exits 0.

The job is an HTTP task against a slow local receiver (tests/bpmn/slow_http_task.bpmn): in flight
for exactly as long as the receiver takes to answer. Its lease is 60 s (the task's 30 s timeout +
30), so a released job completed by another worker within a quarter of that was not waited for.
"""
from __future__ import annotations

import signal
import time
import uuid

import pytest

from tests.harness import BatonServer, BatonWorker, bpmn
from tests.receiver import Answer, Receiver

pytestmark = pytest.mark.slow  # each test starts and stops servers and workers of its own

LEASE_S = 60.0           # the HTTP task's lease: its timeout_s (30) + 30
EXIT_MARGIN_S = 5.0      # after the grace: releasing, closing, the interpreter's exit


class Topology:
    """Who runs the job first (``first``: stopped with SIGTERM) and who finishes it (``second``)."""

    def __init__(self, name: str, database_url: str, tmp_path, grace_s: float):
        self.name, self.url, self.tmp = name, database_url, tmp_path
        env = {"BATON_SHUTDOWN_GRACE_S": str(grace_s), "BATON_JOB_LEASE_S": str(LEASE_S), "BATON_POLL_S": "1"}
        self.env = env
        self.api_server = None
        if name == "worker":   # a server for the API only; the job runs in a `flask worker`
            self.api_server = BatonServer(database_url, tmp_path / "api", BATON_WORKERS="0").start()
            self.first = BatonWorker(database_url, tmp_path, threads=2, **env)
        elif name == "serve":
            self.first = BatonServer(database_url, tmp_path / "first", **env)
        elif name == "serving-processes":  # the default serve: the job runs in a serving process
            self.first = BatonServer(database_url, tmp_path / "first", BATON_WORKER_PROCESSES="",
                                     BATON_SERVE_PROCESSES="2", **env)
        else:                  # serve with BATON_WORKER_PROCESSES=1: the job runs in its child
            self.first = BatonServer(database_url, tmp_path / "first", BATON_WORKER_PROCESSES="1", **env)
        self.first.start()
        self.api_server = self.api_server or self.first
        self.second = None

    def start_second(self):
        """Another worker beside the first (started once the job is in the first's hands)."""
        if self.name == "worker":
            self.second = BatonWorker(self.url, self.tmp, threads=1, BATON_POLL_S="1").start()
        else:
            self.second = BatonServer(self.url, self.tmp / "second", BATON_POLL_S="1").start()
        return self.second

    def api(self, key):
        server = self.api_server if self.api_server.process.poll() is None else self.second
        return server.api(key)

    def stop(self):
        for part in (self.first, self.second, self.api_server):
            if part is not None:
                part.stop()


def dirs(tmp_path):
    for name in ("api", "first", "second"):
        (tmp_path / name).mkdir(exist_ok=True)


def start_slow_job(topology: Topology, receiver: Receiver) -> tuple[str, int]:
    """A tenant, the process, an instance whose HTTP task is on the wire (the receiver has it)."""
    key = topology.api_server.create_tenant(f"stop-{uuid.uuid4().hex[:6]}")
    api = topology.api(key)
    api.deploy(bpmn("slow_http_task.bpmn"), code="slow")
    instance_id = api.call("process.start", definition_id="slow", variables={"target": receiver.url + "/slow"})["instance_id"]
    receiver.wait_for(1, timeout=30)
    return key, instance_id


def sigterm(process, timeout: float) -> tuple[int, float]:
    """SIGTERM; the exit code and the seconds until the process ended."""
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout)
    return code, time.monotonic() - began


# (A supervised child is a `flask worker`: its finishing is the `worker` case; what the supervisor
# adds, handing down the grace and waiting for the child, is the release case below.)
@pytest.mark.parametrize("topology_name", ["serve", "worker", "serving-processes"])
def test_a_job_that_finishes_within_the_grace_period_finishes_and_the_process_exits_0(
        own_database, tmp_path, receiver, topology_name):
    dirs(tmp_path)
    job_s = 3.0
    receiver.default = Answer(200, {"ticket": 7}, delay_s=job_s)
    topology = Topology(topology_name, own_database, tmp_path, grace_s=15)
    try:
        key, instance_id = start_slow_job(topology, receiver)
        asked_at = receiver.requests[0].at
        code, _ = sigterm(topology.first.process, timeout=15 + EXIT_MARGIN_S + 5)
        exited_at = time.time()
        assert code == 0, topology.first.output()[-3000:]
        assert exited_at >= asked_at + job_s - 0.1          # it waited for the answer ...
        topology.start_second()
        status = topology.api(key).wait_for(instance_id, timeout=30)
        assert status["status"] == "completed" and status["variables"]["answer"] == {"ticket": 7}
        assert len(receiver.requests) == 1                  # ... and recorded it: nobody called again
    finally:
        topology.stop()


# Supervised worker processes are SQLite's topology (on PostgreSQL the children are the same
# `flask worker` as the "worker" case), so that case runs on SQLite only.
@pytest.mark.parametrize("backend, topology_name", [
    ("sqlite", "serve"), ("sqlite", "worker"), ("sqlite", "worker-processes"), ("sqlite", "serving-processes"),
    ("postgresql", "serve"), ("postgresql", "worker"), ("postgresql", "serving-processes")], indirect=["backend"])
def test_a_job_longer_than_the_grace_period_is_released_and_another_worker_takes_it_at_once(
        own_database, tmp_path, topology_name, backend):
    dirs(tmp_path)
    grace_s = 1.0
    receiver = Receiver(default=Answer(200, {"ticket": 8})).start()
    receiver.script(Answer(200, {"ticket": "too late"}, delay_s=25))   # the first call outlasts the grace
    topology = Topology(topology_name, own_database, tmp_path, grace_s=grace_s)
    try:
        key, instance_id = start_slow_job(topology, receiver)
        topology.start_second()              # idle: the job is leased to the first for 60 s
        code, took_s = sigterm(topology.first.process, timeout=grace_s + EXIT_MARGIN_S + 10)
        released_at = time.monotonic()
        assert code == 0, topology.first.output()[-3000:]
        assert took_s < grace_s + EXIT_MARGIN_S, took_s
        status = topology.api(key).wait_for(instance_id, timeout=LEASE_S)
        completed_s = time.monotonic() - released_at
        assert status["status"] == "completed" and status["variables"]["answer"] == {"ticket": 8}
        assert completed_s < LEASE_S / 4, completed_s        # not after the lease
        assert len(receiver.requests) == 2                   # the second worker called again
    finally:
        topology.stop()
        receiver.stop()
