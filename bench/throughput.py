"""Throughput of Baton against raw SpiffWorkflow, measured in one run on this machine.

For each benchmark process (--processes, default all three):

  order       tests/bpmn/webhook_order.bpmn: webhook start -> script task -> XOR gateway -> end;
  twenty      bench/bpmn/twenty_tasks.bpmn: webhook start -> 20 script tasks in a chain -> end;
  parallel10  bench/bpmn/parallel_ten.bpmn: webhook start -> parallel split into 10 branches of
              one script task each -> parallel join -> end;

it measures

  (a)  raw SpiffWorkflow 3.2 in memory, its own in-process script engine (eval/exec; builtins
       cut to the few the benchmark scripts call, never the full set): new workflow + start data +
       do_engine_steps + serialize_json, one instance after another (the baseline);
  (a') the same with Baton's SandboxScriptEngine (the sandbox's cost);
  (b)  end to end on SQLite: `flask --app app serve` as `make run` starts it (no setting: serving
       processes picked by the cores, each serving HTTP with granian and running one engine
       thread); webhook starts over HTTP from concurrent clients until every instance is
       `completed` in the database;
  (b') the server on waitress with BATON_WORKER_PROCESSES=2 (--worker-processes) supervised
       worker processes; (b") with 0, workers as threads in the server (the backend
       sqlite-threads, not run by default);
  (c)  end to end on PostgreSQL: the serving processes with BATON_WORKERS=0 (web only) and two
       `flask worker` processes.

End-to-end instances/s = instances / (first request sent -> last instance completed, from the
rows' completed_at). The CPU ratio of a backend is Baton's CPU per instance end to end (server,
workers, sandbox hosts) over raw SpiffWorkflow's CPU per instance in (a), both from this run. Every process and backend gets a fresh server and database. The heavier
processes run fewer instances (a fraction of --count, see PROCESSES) so that the default run
stays at about 4 minutes. The figures are written to bench/results/throughput-latest.json, one
entry per process.

    python bench/throughput.py                       # order 2000, twenty/parallel10 1000 instances
    python bench/throughput.py --quick               # a smoke run (~1 minute)
    python bench/throughput.py --processes twenty --backends sqlite --count 1000 --concurrency 8
"""
from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import requests  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from bench.common import percentile, run_header  # noqa: E402
from tests.harness import (BatonServer, create_postgres_database,  # noqa: E402
                           drop_postgres_database)

RESULTS = ROOT / "bench" / "results" / "throughput-latest.json"
# Targets for `order`, from issue 15: the default (b) and PostgreSQL's scale-out topology (c).
TARGETS = {"sqlite": 0.45, "postgresql": 0.50}
# Targets for `order`, from issue 25: Baton's CPU per instance at most this many times raw's.
CPU_TARGETS = {"sqlite": 2.2, "postgresql": 2.8}
START_DATA = {"amount": 60}          # order: total 120, the "big" branch; the others: step_N, branch_N


@dataclass(frozen=True)
class BenchProcess:
    name: str            # the --processes name
    path: Path           # the BPMN file
    process_id: str      # the executable process in it
    scale: float         # instances = round(--count * scale), for (a), (a') and end to end
    what: str


PROCESSES = {p.name: p for p in (
    BenchProcess("order", ROOT / "tests" / "bpmn" / "webhook_order.bpmn", "order", 1.0,
                 "webhook start -> script task -> exclusive gateway -> end"),
    BenchProcess("twenty", ROOT / "bench" / "bpmn" / "twenty_tasks.bpmn", "twenty_tasks", 0.5,
                 "webhook start -> 20 script tasks in a chain (step_N = amount + N) -> end"),
    BenchProcess("parallel10", ROOT / "bench" / "bpmn" / "parallel_ten.bpmn", "parallel_ten", 0.5,
                 "webhook start -> parallel split -> 10 branches of one script task "
                 "(branch_N = amount + N) -> parallel join -> end"),
)}
BPMN_FILE = PROCESSES["order"].path  # kept for bench/profile_e2e.py and older callers


# =============================================================================================
# (a) and (a'): in memory

def _raw_spec(process: BenchProcess = PROCESSES["order"]):
    from SpiffWorkflow.bpmn.parser.BpmnParser import BpmnParser

    parser = BpmnParser()
    parser.add_bpmn_file(str(process.path))
    return parser.get_spec(process.process_id)


# What the benchmark processes' scripts and conditions call (``int(amount) + N``): the raw
# baseline's in-process engine gets these builtins and no others (no open, __import__, eval ...).
RAW_BUILTINS = {"int": int}


def raw_script_engine():
    """SpiffWorkflow's own in-process engine, as raw SpiffWorkflow runs, but never with the full
    builtins its default environment hands every script: only ``RAW_BUILTINS``."""
    from SpiffWorkflow.bpmn.script_engine import PythonScriptEngine, TaskDataEnvironment

    return PythonScriptEngine(environment=TaskDataEnvironment({"__builtins__": dict(RAW_BUILTINS)}))


def measure_in_memory(count: int, script_engine, warmup: int = 50,
                      process: BenchProcess = PROCESSES["order"]) -> dict:
    """Instances/s of new workflow + start data + do_engine_steps + serialize_json."""
    from SpiffWorkflow.bpmn.serializer import BpmnWorkflowSerializer
    from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
    from SpiffWorkflow.util.task import TaskState

    spec = _raw_spec(process)
    serializer = BpmnWorkflowSerializer()

    def one() -> str:
        workflow = BpmnWorkflow(spec, script_engine=script_engine)
        workflow.get_tasks(state=TaskState.READY)[0].data.update(START_DATA)
        workflow.do_engine_steps()
        if not workflow.is_completed():
            raise RuntimeError("the benchmark process did not complete in memory")
        return serializer.serialize_json(workflow)

    for _ in range(warmup):
        one()
    # CPU of this process and its children: the sandbox host's work is in (a'), as it is in a
    # worker's share end to end.
    cpu = tree_cpu_seconds([os.getpid()])
    started = time.perf_counter()
    for _ in range(count):
        one()
    elapsed = time.perf_counter() - started
    cpu = tree_cpu_seconds([os.getpid()]) - cpu
    return {"instances": count, "seconds": round(elapsed, 3), "per_s": round(count / elapsed, 1),
            "cpu_ms_per_instance": round(1000 * cpu / count, 3)}


def measure_raw(count: int, process: BenchProcess = PROCESSES["order"]) -> dict:
    return measure_in_memory(count, raw_script_engine(), process=process, warmup=min(50, count))


def measure_sandboxed(count: int, process: BenchProcess = PROCESSES["order"]) -> dict:
    from engine.sandbox import Sandbox, SandboxScriptEngine

    sandbox = Sandbox(hosts=1)
    try:
        return measure_in_memory(count, SandboxScriptEngine(sandbox), process=process,
                                 warmup=min(50, count))
    finally:
        sandbox.close()


# =============================================================================================
# (b) and (c): end to end

class Load:
    """``concurrency`` threads, one keep-alive HTTP connection each, POSTing webhook starts."""

    def __init__(self, url: str, count: int, concurrency: int, max_seconds: float):
        self.url = url
        self.count = count
        self.concurrency = concurrency
        self.max_seconds = max_seconds
        self.lock = threading.Lock()
        self.issued = 0
        self.latencies: list[float] = []
        self.instance_ids: list[int] = []
        self.errors: list[str] = []
        self.first_sent: float | None = None   # time.time()
        self.last_accepted: float | None = None

    def _ticket(self, deadline: float) -> bool:
        with self.lock:
            if self.issued >= self.count or time.monotonic() > deadline or len(self.errors) > 20:
                return False
            self.issued += 1
            if self.first_sent is None:
                self.first_sent = time.time()
            return True

    def _client(self, deadline: float) -> None:
        """One keep-alive HTTP/1.1 connection (http.client: the client shares the machine's two
        cores with the server, and requests cost it about 1.5 ms of CPU per call)."""
        target = urllib.parse.urlsplit(self.url)
        path = target.path + (f"?{target.query}" if target.query else "")
        body = json.dumps(START_DATA).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        connection = None
        while self._ticket(deadline):
            started = time.perf_counter()
            try:
                if connection is None:
                    connection = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                connection.request("POST", path, body=body, headers=headers)
                response = connection.getresponse()
                answer = response.read()
                latency = time.perf_counter() - started
                ok = response.status == 202
                instance_id = json.loads(answer).get("instance_id") if ok else None
                problem = None if ok else f"HTTP {response.status}: {answer[:200]!r}"
                if response.will_close:
                    connection.close()
                    connection = None
            except (OSError, http.client.HTTPException, ValueError) as exc:
                latency, instance_id, problem = time.perf_counter() - started, None, repr(exc)
                if connection is not None:
                    connection.close()
                    connection = None
            with self.lock:
                if problem is None:
                    self.latencies.append(latency)
                    self.instance_ids.append(instance_id)
                    self.last_accepted = time.time()
                else:
                    self.errors.append(problem)
        if connection is not None:
            connection.close()

    def run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        threads = [threading.Thread(target=self._client, args=(deadline,), daemon=True)
                   for _ in range(self.concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu_seconds(pids: list[int]) -> float:
    """User+system CPU of these processes and their live descendants (Linux /proc; else 0)."""
    return sum(tree_cpu_by_role(pids).values())


def _role(pid: int) -> str:
    """What a process of the server's tree is, from its command line."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "sandbox" in command and "host" in command:
        return "script hosts"
    if " worker" in command:
        return "worker processes"
    return "server"


def tree_cpu_by_role(pids: list[int]) -> dict[str, float]:
    """``tree_cpu_seconds`` split by the role of each process (server, worker processes, script hosts)."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    by_role: dict[str, float] = {}
    todo, seen = list(pids), set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        role = _role(pid) if pid in cpu else "gone"
        by_role[role] = by_role.get(role, 0.0) + cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return by_role


def _epoch(value) -> float:
    """A naive-UTC datetime (Baton's convention) or SQLite's text form, as a Unix time."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=dt.timezone.utc).timestamp()


def wait_until_completed(database_url: str, after_id: int, expected: int, timeout: float) -> dict:
    """Poll the database until ``expected`` instances with ids above ``after_id`` are completed."""
    engine = create_engine(database_url)
    counts_sql = text("SELECT status, count(*) FROM instances WHERE id > :after GROUP BY status")
    deadline = time.monotonic() + timeout
    try:
        while True:
            with engine.connect() as conn:
                counts = dict(conn.execute(counts_sql, {"after": after_id}).all())
            done = counts.get("completed", 0)
            if done >= expected or counts.get("failed", 0) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        observed_at = time.time()
        with engine.connect() as conn:
            last, = conn.execute(text("SELECT max(completed_at) FROM instances "
                                      "WHERE status = 'completed' AND id > :after"),
                                 {"after": after_id}).one()
        return {"counts": counts, "last_completed": _epoch(last) if last else None,
                "observed_at": observed_at}
    finally:
        engine.dispose()


def _start_workers(server: BatonServer, processes: int, workdir: Path, threads: int = 1) -> list[subprocess.Popen]:
    workers = []
    for index in range(processes):
        log = open(workdir / f"worker-{index}.log", "w")
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "flask", "--app", "app", "worker", "--threads", str(threads)],
            cwd=ROOT, env=server.env, stdout=log, stderr=subprocess.STDOUT))
        log.close()
    deadline = time.monotonic() + 60
    for index, process in enumerate(workers):
        path = workdir / f"worker-{index}.log"
        while "worker running" not in path.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {index} did not start: {path.read_text()[-2000:]}")
            time.sleep(0.1)
    return workers


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _default_processes() -> int:
    from engine.jobs.processes import default_count

    return default_count(os.cpu_count() or 1)


def measure_end_to_end(backend: str, args, workdir: Path, log=print,
                       process: BenchProcess = PROCESSES["order"], count: int | None = None) -> dict:
    """One server (and its workers) on a fresh database; ``count`` (``args.count``) webhook starts."""
    count = args.count if count is None else count
    env = {"BATON_WORKER_PROCESSES": ""}  # unset: what `make run` starts (by the cores)
    if backend.startswith("sqlite"):
        database_url = f"sqlite:///{workdir / 'bench.db'}"
        worker_processes = args.sqlite_worker_processes
        if backend == "sqlite-processes":  # the knob: the server supervises N worker processes
            env["BATON_WORKER_PROCESSES"] = str(args.worker_processes)
        elif backend == "sqlite-threads":  # the knob's 0: worker threads inside the server
            env["BATON_WORKER_PROCESSES"] = "0"
    else:
        database_url = create_postgres_database()
        worker_processes = 2
    if worker_processes:
        env["BATON_WORKERS"] = "0"
    env.update(args.server_env)
    server = BatonServer(database_url, workdir, **env)
    workers: list[subprocess.Popen] = []
    try:
        server.start()
        tenant = f"bench-{uuid.uuid4().hex[:8]}"
        key = server.create_tenant(tenant)
        deployed = server.api(key).deploy(process.path.read_text(encoding="utf-8"),
                                          code=f"bench-{process.name}")
        url = deployed["webhooks"][0]["url"]
        if worker_processes:
            workers = _start_workers(server, worker_processes, workdir)
        # A few instances end to end first, not counted: the spec cache, the sandbox hosts and
        # the connection pools are warm before the clock starts.
        warm_ids = [requests.post(url, json=START_DATA, timeout=30).json()["instance_id"]
                    for _ in range(4)]
        wait_until_completed(database_url, min(warm_ids) - 1, len(warm_ids), 30)
        after_id = max(warm_ids)

        log(f"  {backend}: {count} webhook starts, {args.concurrency} clients ...")
        load = Load(url, count, args.concurrency, args.max_seconds)
        pids = [server.process.pid] + [w.pid for w in workers]
        server_cpu, client_cpu = tree_cpu_seconds(pids), time.process_time()
        roles_before = tree_cpu_by_role(pids)
        load.run()
        client_cpu = time.process_time() - client_cpu
        accepted = len(load.instance_ids)
        if accepted == 0:
            raise RuntimeError(f"no webhook start was accepted: {load.errors[:3]}")
        done = wait_until_completed(database_url, after_id, accepted, args.drain_timeout)
        server_cpu = tree_cpu_seconds(pids) - server_cpu
        roles_after = tree_cpu_by_role(pids)
        roles = {role: round(1000 * (roles_after.get(role, 0.0) - roles_before.get(role, 0.0)) / max(1, accepted), 3)
                 for role in sorted(set(roles_after) | set(roles_before)) if role != "gone"}
        completed = done["counts"].get("completed", 0)
        end = done["last_completed"] or done["observed_at"]
        elapsed = end - load.first_sent
        accept_s = load.last_accepted - load.first_sent
        lat = load.latencies
        result = {
            "backend": backend,
            "topology": (f"server BATON_WORKERS=0 + {worker_processes} `flask worker` processes"
                         if worker_processes else
                         f"server supervising BATON_WORKER_PROCESSES={env['BATON_WORKER_PROCESSES']} "
                         f"worker processes (BATON_WORKERS={env.get('BATON_WORKERS', 'unset: 1')} engine threads each)"
                         if env["BATON_WORKER_PROCESSES"] not in ("", "0") else
                         f"server with in-process workers (BATON_WORKERS={env.get('BATON_WORKERS', 'unset: 2')})"
                         if env["BATON_WORKER_PROCESSES"] == "0" else
                         f"the default `serve` ({_default_processes()} serving processes on {os.cpu_count()} cores, "
                         f"each serving HTTP with granian and running BATON_WORKERS="
                         f"{env.get('BATON_WORKERS', 'unset: 1')} engine threads)"),
            "requested": count, "accepted": accepted, "completed": completed,
            "statuses": done["counts"], "http_errors": len(load.errors),
            "first_errors": load.errors[:3],
            "concurrency": args.concurrency,
            "seconds": round(elapsed, 3),
            "per_s": round(completed / elapsed, 1) if elapsed > 0 else None,
            "accept_per_s": round(accepted / accept_s, 1) if accept_s > 0 else None,
            "drain_after_last_accept_s": round(end - load.last_accepted, 3),
            # Baton's processes (server, workers, sandbox hosts) and this client, per instance:
            # with 2 cores the two share 2 x seconds of CPU.
            "server_cpu_ms_per_instance": round(1000 * server_cpu / max(completed, 1), 3),
            "cpu_ms_per_instance_by_process": roles,
            "client_cpu_ms_per_instance": round(1000 * client_cpu / max(accepted, 1), 2),
            "accept_latency_ms": {"p50": round(percentile(lat, 50) * 1000, 1),
                                  "p99": round(percentile(lat, 99) * 1000, 1),
                                  "mean": round(statistics.fmean(lat) * 1000, 1),
                                  "max": round(max(lat) * 1000, 1)},
        }
        if completed < accepted:
            result["incomplete"] = f"{accepted - completed} instances not completed in time"
        return result
    finally:
        _stop(workers)
        server.stop()
        if backend == "postgresql":
            drop_postgres_database(database_url)


# =============================================================================================
# Report

ROW_NAMES = {"raw": "(a)  raw SpiffWorkflow, in memory",
             "sandboxed": "(a') with Baton's sandbox, in memory",
             "sqlite": "(b)  end to end, SQLite, the default",
             "sqlite-processes": "(b') end to end, SQLite, worker processes",
             "sqlite-threads": "(b\") end to end, SQLite, threads in server",
             "postgresql": "(c)  end to end, PostgreSQL"}


def print_process_table(name: str, entry: dict) -> None:
    """One block: the rows (a), (a'), (b), (c) of one process, their ratios and details."""
    raw = entry["raw"]["per_s"]
    print()
    print(f"== {name}: {entry['what']}  [{entry['bpmn']}]")
    print(f"   {entry['count']} instances end to end, {entry['raw_count']} in memory"
          + (f" (--count x {entry['scale']:g}: fewer, each instance is heavier)"
             if entry["scale"] != 1 else ""))
    print(f"{'':40} {'inst/s':>8} {'ratio':>7} {'accept p50':>11} {'p99':>10} {'CPU/inst':>10}   instances")
    rows = [("raw", entry["raw"]), ("sandboxed", entry["sandboxed"])]
    rows += list(entry["end_to_end"].items())
    for key, result in rows:
        label = ROW_NAMES[key]
        if "error" in result:
            print(f"{label:40} {'failed':>8}   {result['error']}")
            continue
        latency = result.get("accept_latency_ms")
        p50 = f"{latency['p50']:.1f} ms" if latency else ""
        p99 = f"{latency['p99']:.1f} ms" if latency else ""
        cpu = result.get("server_cpu_ms_per_instance", result.get("cpu_ms_per_instance"))
        cpu = f"{cpu:.2f} ms" if cpu is not None else ""
        count = result.get("completed", result.get("instances", ""))
        print(f"{label:40} {result['per_s']:>8.1f} {result['per_s'] / raw:>7.3f} {p50:>11} "
              f"{p99:>10} {cpu:>10}   {count}")
    for ratio in entry["ratios"].values():
        print(f"  {ratio['name']} = {ratio['value']:.3f}" + (f"   (target >= {ratio['target']:.2f}: "
              f"{'met' if ratio['met'] else 'NOT met'})" if "target" in ratio else ""))
    for backend, ratio in entry.get("cpu_ratios", {}).items():
        print(f"  CPU ratio, {backend}: Baton {ratio['baton_cpu_ms']:.3f} ms / raw {ratio['raw_cpu_ms']:.3f} ms per "
              f"instance = {ratio['value']:.2f}" + (f"   (target <= {ratio['target']:.1f}: "
              f"{'met' if ratio['met'] else 'NOT met'})" if "target" in ratio else ""))
    for backend, result in entry["end_to_end"].items():
        if "error" not in result:
            print(f"  {backend}: {result['topology']}, {result['concurrency']} clients; accepted "
                  f"{result['accept_per_s']}/s while loading, drained "
                  f"{result['drain_after_last_accept_s']} s after the last accept; statuses "
                  f"{result['statuses']}; HTTP errors {result['http_errors']}")
            print(f"  {backend}: CPU per instance: Baton {result['server_cpu_ms_per_instance']} ms "
                  f"(server, workers, sandbox hosts), bench client {result['client_cpu_ms_per_instance']} ms")
            by_process = result.get("cpu_ms_per_instance_by_process") or {}
            if by_process:
                print(f"  {backend}: Baton's CPU per instance by process: "
                      + ", ".join(f"{role} {ms} ms" for role, ms in by_process.items()))


def print_summary(report: dict) -> None:
    """All processes side by side: instances/s and the ratios to (a)."""
    processes = report["processes"]
    print()
    print("{:12} {:>9} {:>9} {:>11} {:>11} {:>9} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8}".format(
        "inst/s", "(a) raw", "(a') sbx", "(b) SQLite", "(b') SQ+wp", "(c) PG", "a'/a", "b/a", "b'/a", "c/a",
        "CPU b/a", "CPU c/a"))
    for name, entry in processes.items():
        def rate(result):
            return f"{result['per_s']:.1f}" if result and "error" not in result else "-"

        def ratio(key):
            value = entry["ratios"].get(key)
            return f"{value['value']:.3f}" if value else "-"
        def cpu(key):
            value = entry.get("cpu_ratios", {}).get(key)
            return f"{value['value']:.2f}" if value else "-"
        e2e = entry["end_to_end"]
        print(f"{name:12} {rate(entry['raw']):>9} {rate(entry['sandboxed']):>9} "
              f"{rate(e2e.get('sqlite')):>11} {rate(e2e.get('sqlite-processes')):>11} "
              f"{rate(e2e.get('postgresql')):>9} {ratio('sandboxed'):>7} {ratio('sqlite'):>7} "
              f"{ratio('sqlite-processes'):>7} {ratio('postgresql'):>7} {cpu('sqlite'):>8} {cpu('postgresql'):>8}")


def print_table(report: dict) -> None:
    for name, entry in report["processes"].items():
        print_process_table(name, entry)
    print_summary(report)
    machine = report["machine"]
    print(f"\n  {machine['cores']} cores (load average {machine['load_average_before'][0]} before, "
          f"{machine['load_average_after'][0]} after), commit {report['git_commit']}, {report['date']}")


def _ratios(name: str, raw: dict, sandboxed: dict, end_to_end: dict) -> dict:
    ratios = {"sandboxed": {"name": "a'/a (sandbox)", "value": sandboxed["per_s"] / raw["per_s"]}}
    letters = {"sqlite": "b/a", "sqlite-processes": "b'/a", "sqlite-threads": 'b"/a', "postgresql": "c/a"}
    for backend, result in end_to_end.items():
        if "error" not in result:
            ratio = {"name": f"{letters[backend]} ({backend} end to end)",
                     "value": result["per_s"] / raw["per_s"]}
            if backend in TARGETS and name == "order":
                ratio.update(target=TARGETS[backend], met=ratio["value"] >= TARGETS[backend])
            ratios[backend] = ratio
    return {k: {**v, "value": round(v["value"], 3)} for k, v in ratios.items()}


def _cpu_ratios(name: str, raw: dict, end_to_end: dict) -> dict:
    """Per backend: Baton's CPU per instance end to end / raw SpiffWorkflow's CPU per instance."""
    ratios = {}
    for backend, result in end_to_end.items():
        if "error" in result or not raw["cpu_ms_per_instance"]:
            continue
        value = result["server_cpu_ms_per_instance"] / raw["cpu_ms_per_instance"]
        ratio = {"value": round(value, 2), "baton_cpu_ms": result["server_cpu_ms_per_instance"],
                 "raw_cpu_ms": raw["cpu_ms_per_instance"]}
        if backend in CPU_TARGETS and name == "order":
            ratio.update(target=CPU_TARGETS[backend], met=value <= CPU_TARGETS[backend])
        ratios[backend] = ratio
    return ratios


def run_process(process: BenchProcess, backends: list[str], args) -> dict:
    count = max(1, round(args.count * process.scale))
    raw_count = max(1, round(args.raw_count * process.scale))
    load_before = os.getloadavg()
    print(f"[{process.name}] {process.what}", flush=True)
    print(f"  (a)  raw SpiffWorkflow, {raw_count} instances ...", flush=True)
    raw = measure_raw(raw_count, process)
    print(f"  (a') Baton's sandbox, {raw_count} instances ...", flush=True)
    sandboxed = measure_sandboxed(raw_count, process)
    end_to_end = {}
    for backend in backends:
        workdir = Path(tempfile.mkdtemp(prefix=f"baton-bench-{backend}-"))
        try:
            end_to_end[backend] = measure_end_to_end(backend, args, workdir,
                                                     log=lambda m: print(m, flush=True),
                                                     process=process, count=count)
        except Exception as exc:  # noqa: BLE001 - report the others; exit code says it failed
            end_to_end[backend] = {"error": f"{type(exc).__name__}: {exc}"}
            for log_file in sorted(workdir.glob("*.log")):
                print(f"--- {log_file.name}\n{log_file.read_text()[-3000:]}", file=sys.stderr)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return {
        "bpmn": str(process.path.relative_to(ROOT)), "process_id": process.process_id,
        "what": process.what, "scale": process.scale, "count": count, "raw_count": raw_count,
        "start_data": START_DATA,
        "load_average_before": [round(x, 2) for x in load_before],
        "raw": raw, "sandboxed": sandboxed, "end_to_end": end_to_end,
        "ratios": _ratios(process.name, raw, sandboxed, end_to_end),
        "cpu_ratios": _cpu_ratios(process.name, raw, end_to_end),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default=",".join(PROCESSES),
                        help=f"comma-separated: {', '.join(PROCESSES)} (default all)")
    parser.add_argument("--count", type=int, default=2000,
                        help="webhook starts per backend for `order` (default 2000); twenty and "
                             "parallel10 run half of it")
    parser.add_argument("--raw-count", type=int, default=None,
                        help="in-memory instances for (a) and (a'), scaled the same way (default: --count)")
    parser.add_argument("--concurrency", type=int, default=16, help="HTTP client threads (default 16)")
    parser.add_argument("--backends", default="sqlite,sqlite-processes,postgresql",
                        help="comma-separated: sqlite (the default `serve`), sqlite-processes "
                             "(BATON_WORKER_PROCESSES=N), sqlite-threads (BATON_WORKER_PROCESSES=0: workers "
                             "as threads in the server), postgresql (default: sqlite, sqlite-processes, postgresql)")
    parser.add_argument("--worker-processes", type=int, default=2, metavar="N",
                        help="BATON_WORKER_PROCESSES of the sqlite-processes backend (default 2)")
    parser.add_argument("--max-seconds", type=float, default=20.0,
                        help="stop sending after this long even if the count is not reached (default 20)")
    parser.add_argument("--drain-timeout", type=float, default=120.0,
                        help="how long to wait for the accepted instances to complete (default 120)")
    parser.add_argument("--sqlite-worker-processes", type=int, default=0, metavar="N",
                        help="SQLite: BATON_WORKERS=0 and N `flask worker` processes instead of the "
                             "embedded default (they find jobs by polling: set BATON_POLL_S too)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: --count 300 (150 for the heavier processes), 8 clients")
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment for the server and workers (repeatable)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    args = parser.parse_args(argv)
    if args.quick:
        args.count, args.concurrency = min(args.count, 300), min(args.concurrency, 8)
    args.raw_count = args.raw_count or args.count
    args.server_env = dict(item.split("=", 1) for item in args.server_env)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for backend in backends:
        if backend not in ("sqlite", "sqlite-processes", "sqlite-threads", "postgresql"):
            parser.error(f"unknown backend {backend!r}")
    names = [n.strip() for n in args.processes.split(",") if n.strip()]
    for name in names:
        if name not in PROCESSES:
            parser.error(f"unknown process {name!r} (known: {', '.join(PROCESSES)})")

    load_before = os.getloadavg()
    if load_before[0] > (os.cpu_count() or 1) * 0.5:
        print(f"note: the machine is already busy (load average {load_before[0]:.1f} on "
              f"{os.cpu_count()} cores); absolute figures will be low and noisy", flush=True)
    started = time.monotonic()
    processes = {name: run_process(PROCESSES[name], backends, args) for name in names}
    report = {
        **run_header(load_before, postgresql="postgresql" in backends),
        "options": {"processes": names, "count": args.count, "raw_count": args.raw_count,
                    "concurrency": args.concurrency,
                    "sqlite_worker_processes": args.sqlite_worker_processes,
                    "worker_processes": args.worker_processes,
                    "backends": backends, "quick": args.quick, "max_seconds": args.max_seconds,
                    "server_env": args.server_env},
        "run_seconds": round(time.monotonic() - started, 1),
        "processes": processes,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    print(f"  run took {report['run_seconds']} s; written to {args.output}")
    failed = any("error" in r or "incomplete" in r or r.get("http_errors")
                 for entry in processes.values() for r in entry["end_to_end"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
