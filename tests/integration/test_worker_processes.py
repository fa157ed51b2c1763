"""``BATON_WORKER_PROCESSES=N``: the server supervises N worker processes, over real HTTP.

The children are found in /proc (children of the server whose command line is
``flask ... worker ... --wake-from-stdin``). A child is killed with SIGKILL in the middle of a
burst of webhook starts: the server starts a new one, the killed child's leased jobs are claimed
again when their lease runs out, and every start answered 202 completes exactly once. When the
server itself is killed, its children see the end of their stdin pipe and exit.
"""
from __future__ import annotations

import concurrent.futures
import os
import signal

import pytest
import requests
from sqlalchemy import create_engine, text

from tests.conftest import BACKENDS
from tests.harness import BatonServer, alive, bpmn, child_processes, eventually

CALLS = 200
KILL_AFTER = 60


def worker_children(server_pid: int) -> list[int]:
    return child_processes(server_pid, b"--wake-from-stdin")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_killed_worker_process_is_replaced_and_no_start_is_lost(backend, own_database, tmp_path):
    server = BatonServer(own_database, tmp_path, BATON_WORKER_PROCESSES="2", BATON_JOB_LEASE_S="2")
    try:
        server.start()
        key = server.create_tenant("wp")
        url = server.api(key).deploy(bpmn("webhook_order.bpmn"), code="wp")["webhooks"][0]["url"]
        children = eventually(lambda: len(worker_children(server.process.pid)) == 2
                            and worker_children(server.process.pid), 60, "two worker processes")

        answered: dict[int, int] = {}
        killed: list[int] = []

        def start(seq: int):
            response = requests.post(url, json={"amount": 60, "seq": seq}, timeout=60)
            assert response.status_code == 202, response.text
            answered[seq] = response.json()["instance_id"]
            if len(answered) >= KILL_AFTER and not killed:
                killed.append(children[0])
                os.kill(children[0], signal.SIGKILL)

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for future in [pool.submit(start, seq) for seq in range(CALLS)]:
                future.result()
        assert killed and len(answered) == CALLS

        replaced = eventually(lambda: (lambda now: len(now) == 2 and killed[0] not in now and now)(
            worker_children(server.process.pid)), 30, "a new worker process")
        assert children[1] in replaced  # the other child was left alone

        engine = create_engine(own_database)
        try:
            def all_completed():
                with engine.connect() as conn:
                    return conn.execute(text("SELECT count(*) FROM instances WHERE status = 'completed'")).scalar() \
                        == CALLS
            eventually(all_completed, 120, "every instance completed")
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT id, status FROM instances")).all()
                jobs_left = conn.execute(text("SELECT count(*) FROM jobs WHERE kind <> 'retention'")).scalar()
        finally:
            engine.dispose()
        assert sorted(r.id for r in rows) == sorted(answered.values())  # one instance per call
        assert {r.status for r in rows} == {"completed"} and jobs_left == 0
        status = server.api(key).call("process.status", instance_id=answered[0])
        assert status["status"] == "completed" and status["variables"] == {"total": 120, "label": "big"}
    finally:
        server.stop()


def test_worker_processes_exit_with_the_server(tmp_path):
    server = BatonServer(f"sqlite:///{tmp_path / 'wp.db'}", tmp_path, BATON_WORKER_PROCESSES="2")
    children: list[int] = []
    try:
        server.start()
        children = eventually(lambda: len(worker_children(server.process.pid)) == 2
                            and worker_children(server.process.pid), 60, "two worker processes")
        server.kill()  # SIGKILL: no clean-up in the server; the children see their stdin close
        eventually(lambda: not any(alive(pid) for pid in children), 30, "the worker processes to exit")
    finally:
        server.stop()
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

