"""The durability proof: ``kill -9`` every Baton process in the middle of a burst of webhook starts.

Each backend gets its own database and its own processes (the session ``server`` fixture is not
used: this test kills what it runs). SQLite: one server with its in-process workers (the embedded
default). PostgreSQL: a web-only server (``BATON_WORKERS=0``) plus two ``flask worker`` processes.

500 webhook calls, each with a unique ``seq`` variable, go out from a thread pool; when about half
have been answered, every Baton process gets SIGKILL at once. The same processes are then started
again on the same database and the test waits until no instance is running. Then, read straight
from the database: every call answered 202 has its instance, exactly once, completed, with its own
``seq``; no ``seq`` has two instances (a call that got no answer may have started 0 or 1); no job
is left; each instance's history holds its start and its end exactly once (and, at the kill, it
agreed with the instance's status: written in the same transactions). A sample is also read back
through ``process.status``.

The process's script also works for about 10 ms (``BUSY_SCRIPT``), several times what accepting a
webhook costs, so that the workers fall behind the burst and the kill finds instances queued and
mid-advance: with the plain script, the two PostgreSQL worker processes kept up with the server
and at times had completed every instance before the kill (nothing left to recover).

On "doubling": the process keeps its data in the instance row, so a start job run twice cannot
show up as a second append somewhere; what can double is the instance itself (two rows for one
call) and that is what the one-instance-per-``seq`` check catches. Work run twice *inside* one
instance is prevented by the revision compare-and-swap in ``engine/runner.py``; a lost start shows
up as a 202-answered ``instance_id`` that is missing or never completes.
"""
from __future__ import annotations

import collections
import concurrent.futures
import json
import random
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import requests
from sqlalchemy import create_engine, text

from tests.conftest import BACKENDS
from tests.harness import BatonServer, BatonWorker, bpmn

TOTAL_CALLS = 500
KILL_AFTER_ANSWERED = TOTAL_CALLS // 2
CLIENT_THREADS = 16
LEASE_S = "2"              # a killed worker's jobs are claimable again 2 s after their last claim
WORKER_PROCESSES = 2       # PostgreSQL only
THREADS_PER_WORKER = 2
SETTLE_TIMEOUT_S = 120.0
BUSY_SCRIPT = "spent = sum(range(1000000))\n"  # ~10 ms of the sandbox's CPU, thrown away
STATUS_SAMPLE = 25


class Cluster:
    """All Baton processes of one test, on one database, started and killed together."""

    def __init__(self, backend: str, database_url: str, workdir: Path):
        common = {"BATON_JOB_LEASE_S": LEASE_S}
        if backend == "sqlite":
            self.server = BatonServer(database_url, workdir, **common)  # in-process workers
            self.workers: list[BatonWorker] = []
        else:
            self.server = BatonServer(database_url, workdir, BATON_WORKERS="0", **common)
            self.workers = [BatonWorker(database_url, workdir, threads=THREADS_PER_WORKER, **common)
                            for _ in range(WORKER_PROCESSES)]

    @property
    def processes(self):
        return [self.server, *self.workers]

    def start(self) -> None:
        """The server first (it migrates a fresh database), then the workers."""
        self.server.start()
        for worker in self.workers:
            worker.start()

    def restart(self) -> None:
        """Every process at once, as after a host reboot: nobody waits for anybody."""
        with concurrent.futures.ThreadPoolExecutor(len(self.processes)) as pool:
            for future in [pool.submit(p.start) for p in self.processes]:
                future.result()

    def kill_all(self) -> None:
        """SIGKILL to every process first, then reap them (no process outlives another's kill)."""
        alive = [p.process for p in self.processes if p.process and p.process.poll() is None]
        for process in alive:
            process.send_signal(signal.SIGKILL)
        for process in alive:
            process.wait(10)

    def stop(self) -> None:
        for process in self.processes:
            process.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path.name}\n{p.output()[-4000:]}" for p in self.processes
                         if p.log_path.exists())


def _variables(value) -> dict:
    return json.loads(value) if isinstance(value, str) else (value or {})


def read_instances(engine) -> dict[int, tuple[str, dict]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, status, variables FROM instances")).all()
    return {row.id: (row.status, _variables(row.variables)) for row in rows}


def read_history(engine) -> dict[int, list[str]]:
    """Each instance's history, as the kinds of its events in order."""
    found: dict[int, list[str]] = collections.defaultdict(list)
    with engine.connect() as conn:
        for instance_id, kind in conn.execute(text("SELECT instance_id, kind FROM history_events ORDER BY id")):
            found[instance_id].append(kind)
    return found


def read_jobs(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(text("SELECT id, instance_id, kind, locked_by, locked_until, attempts FROM jobs "
                                 "WHERE kind <> 'retention'")).all()  # (retention: a schedule, always there)


def snapshot_engine(backend: str, database_url: str, snapshot_dir: Path):
    """An engine on the database exactly as the kill left it.

    SQLite: a copy of the file and its WAL, so that the restarted server (not this test) is the
    first to open the crashed database and recover its WAL. PostgreSQL: the database itself.
    """
    if backend != "sqlite":
        return create_engine(database_url)
    source = Path(database_url.removeprefix("sqlite:///"))
    snapshot_dir.mkdir()
    for suffix in ("", "-wal"):
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", snapshot_dir / f"{source.name}{suffix}")
    return create_engine(f"sqlite:///{snapshot_dir / source.name}")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_9_mid_burst_loses_and_doubles_no_start(backend, own_database, tmp_path):
    began = time.monotonic()
    cluster = Cluster(backend, own_database, tmp_path)
    engine = None
    try:
        cluster.start()
        api = cluster.server.api(cluster.server.create_tenant("crash"))
        plain = bpmn("webhook_order.bpmn")
        busy = plain.replace("<bpmn:script>total =", f"<bpmn:script>{BUSY_SCRIPT}total =")
        assert busy != plain
        [route] = api.deploy(busy, code="crash-order")["webhooks"]
        url = route["url"]

        # --- the burst, and the kill in its middle ---------------------------------------------
        lock = threading.Lock()
        answered: dict[int, int] = {}        # seq -> instance_id, for every 202
        failed: dict[int, str] = {}          # seq -> why the call got no answer
        other: dict[int, tuple[int, str]] = {}  # seq -> any answer that was not 202
        half_answered = threading.Event()

        def call(seq: int) -> None:
            try:  # requests does not retry: a call is sent at most once
                response = requests.post(url, json={"amount": seq, "seq": seq}, timeout=30)
            except requests.RequestException as exc:
                with lock:
                    failed[seq] = type(exc).__name__
                return
            with lock:
                if response.status_code == 202:
                    answered[seq] = response.json()["instance_id"]
                    if len(answered) >= KILL_AFTER_ANSWERED:
                        half_answered.set()
                else:
                    other[seq] = (response.status_code, response.text[:300])

        with concurrent.futures.ThreadPoolExecutor(CLIENT_THREADS) as pool:
            futures = [pool.submit(call, seq) for seq in range(TOTAL_CALLS)]
            assert half_answered.wait(60), f"only {len(answered)} calls answered in 60 s\n{cluster.logs()}"
            cluster.kill_all()
            with lock:
                answered_at_kill = len(answered)
            for future in futures:
                future.result()

        assert not other, f"answers other than 202: {dict(list(other.items())[:5])}\n{cluster.logs()}"
        assert len(answered) + len(failed) == TOTAL_CALLS
        assert KILL_AFTER_ANSWERED <= answered_at_kill < TOTAL_CALLS and failed, \
            f"the kill was not mid-way: {answered_at_kill} answered at the kill, {len(failed)} failed"

        # --- what the kill left behind -----------------------------------------------------------
        snapshot = snapshot_engine(backend, own_database, tmp_path / "snapshot")
        try:
            at_kill = read_instances(snapshot)
            jobs_at_kill = read_jobs(snapshot)
            history_at_kill = read_history(snapshot)
        finally:
            snapshot.dispose()
        running_at_kill = {i for i, (status, _) in at_kill.items() if status == "running"}
        leased_at_kill = [job for job in jobs_at_kill if job.locked_by is not None]
        assert running_at_kill, "every instance had completed before the kill: kill earlier"
        assert set(answered.values()) <= set(at_kill), "a 202 was sent before its instance was committed"
        # The history was committed with what it records: a start with each instance, an end with each end.
        unlike = {i: history_at_kill.get(i) for i, (status, _) in at_kill.items()
                  if history_at_kill.get(i) != ["started"] + (["completed"] if status == "completed" else [])}
        assert not unlike, f"histories that disagree with their instance at the kill: {dict(list(unlike.items())[:5])}"
        assert set(history_at_kill) <= set(at_kill)

        # --- restart on the same database, let the backlog drain ----------------------------------
        restart_began = time.monotonic()
        cluster.restart()
        engine = create_engine(own_database)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            final = read_instances(engine)
            still_running = sorted(i for i, (status, _) in final.items() if status == "running")
            if not still_running:
                break
            assert time.monotonic() < deadline, (
                f"{len(still_running)} instances still running {SETTLE_TIMEOUT_S:.0f} s after the restart, "
                f"e.g. {still_running[:10]}; jobs: {read_jobs(engine)[:10]}\n{cluster.logs()}")
            time.sleep(0.2)
        drained_s = time.monotonic() - restart_began

        # --- nothing lost, nothing doubled ----------------------------------------------------------
        by_seq = collections.defaultdict(list)
        for instance_id, (_, variables) in final.items():
            by_seq[variables.get("seq")].append(instance_id)
        doubled = {seq: ids for seq, ids in by_seq.items() if len(ids) > 1}
        assert not doubled, f"calls that started more than one instance: {doubled}"
        assert set(by_seq) <= set(range(TOTAL_CALLS)), f"instances without a known seq: {by_seq.get(None)}"

        lost = {seq: iid for seq, iid in answered.items() if iid not in final}
        assert not lost, f"202-answered starts with no instance: {lost}"
        wrong = {seq: (iid, final[iid]) for seq, iid in answered.items() if final[iid][1].get("seq") != seq}
        assert not wrong, f"202-answered instances carrying another call's seq: {wrong}"

        not_completed = {iid: status for iid, (status, _) in final.items() if status != "completed"}
        assert not not_completed, f"instances that did not complete: {not_completed}\n{cluster.logs()}"
        miscomputed = {iid: v for iid, (_, v) in final.items() if v.get("total") != 2 * v["seq"]}
        assert not miscomputed, f"instances whose script result is wrong: {miscomputed}"

        history = read_history(engine)
        unlike = {i: kinds for i, kinds in history.items() if kinds != ["started", "completed"]}
        assert not unlike and set(history) == set(final), \
            f"histories lost or doubled by the crash: {dict(list(unlike.items())[:5])}"

        leftover_jobs = read_jobs(engine)
        assert not leftover_jobs, f"jobs left after every instance completed: {leftover_jobs}"

        # Through the API too, for a sample that favours instances the kill interrupted.
        interrupted = [(seq, iid) for seq, iid in answered.items() if iid in running_at_kill]
        rest = [(seq, iid) for seq, iid in answered.items() if iid not in running_at_kill]
        random.shuffle(interrupted)
        random.shuffle(rest)
        sample = (interrupted[:STATUS_SAMPLE] + rest)[:STATUS_SAMPLE]
        for seq, instance_id in sample:
            status = api.call("process.status", instance_id=instance_id)
            assert status["status"] == "completed", status
            assert status["variables"]["total"] == 2 * seq, status
            assert status["variables"].get("seq", seq) == seq, status  # big orders expose total/label only

        started_unanswered = len(final) - len(answered)
        print(f"\n[{backend}] calls: {len(answered)} answered 202 ({answered_at_kill} when killed), "
              f"{len(failed)} failed ({dict(collections.Counter(failed.values()))}); "
              f"{started_unanswered} unanswered calls had started an instance; "
              f"at the kill: {len(running_at_kill)} running, {len(at_kill) - len(running_at_kill)} done, "
              f"{len(jobs_at_kill)} jobs ({len(leased_at_kill)} leased); "
              f"after restart: {len(final)} completed, {len(running_at_kill)} recovered in {drained_s:.1f} s; "
              f"total {time.monotonic() - began:.1f} s")
    finally:
        cluster.stop()
        if engine is not None:
            engine.dispose()
