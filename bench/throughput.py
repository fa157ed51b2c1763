"""Throughput of Baton against raw SpiffWorkflow, measured in one run on this machine.

  (a)  raw SpiffWorkflow 3.2 in memory, default script engine: new workflow + start data +
       do_engine_steps + serialize_json, one instance after another (the baseline);
  (a') the same with Baton's SandboxScriptEngine (the sandbox's cost);
  (b)  end to end on SQLite: `flask --app app serve` with its in-process workers (BATON_WORKERS
       default 2); webhook starts over HTTP from concurrent clients until every instance is
       `completed` in the database;
  (c)  end to end on PostgreSQL: the server with BATON_WORKERS=0 and two `flask worker` processes.

End-to-end instances/s = instances / (first request sent -> last instance completed, from the
rows' completed_at). The figures are written to bench/results/throughput-latest.json.

    python bench/throughput.py                       # 2000 instances per backend, 16 clients
    python bench/throughput.py --quick               # a smoke run (~1 minute)
    python bench/throughput.py --backends sqlite --count 1000 --concurrency 8
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import requests  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from tests.harness import (BatonServer, bpmn, create_postgres_database,  # noqa: E402
                           drop_postgres_database)

BPMN_FILE = ROOT / "tests" / "bpmn" / "webhook_order.bpmn"
RESULTS = ROOT / "bench" / "results" / "throughput-latest.json"
TARGET_SQLITE_RATIO = 0.30
START_DATA = {"amount": 60}          # -> total 120, the "big" branch


# =============================================================================================
# (a) and (a'): in memory

def _raw_spec():
    from SpiffWorkflow.bpmn.parser.BpmnParser import BpmnParser

    parser = BpmnParser()
    parser.add_bpmn_file(str(BPMN_FILE))
    return parser.get_spec("order")


def measure_in_memory(count: int, script_engine=None, warmup: int = 50) -> dict:
    """Instances/s of new workflow + start data + do_engine_steps + serialize_json."""
    from SpiffWorkflow.bpmn.serializer import BpmnWorkflowSerializer
    from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
    from SpiffWorkflow.util.task import TaskState

    spec = _raw_spec()
    serializer = BpmnWorkflowSerializer()
    kwargs = {"script_engine": script_engine} if script_engine is not None else {}

    def one() -> str:
        workflow = BpmnWorkflow(spec, **kwargs)
        workflow.get_tasks(state=TaskState.READY)[0].data.update(START_DATA)
        workflow.do_engine_steps()
        if not workflow.is_completed():
            raise RuntimeError("the benchmark process did not complete in memory")
        return serializer.serialize_json(workflow)

    for _ in range(warmup):
        one()
    started = time.perf_counter()
    for _ in range(count):
        one()
    elapsed = time.perf_counter() - started
    return {"instances": count, "seconds": round(elapsed, 3), "per_s": round(count / elapsed, 1)}


def measure_raw(count: int) -> dict:
    return measure_in_memory(count)


def measure_sandboxed(count: int) -> dict:
    from engine.sandbox import Sandbox, SandboxScriptEngine

    sandbox = Sandbox(hosts=1)
    try:
        return measure_in_memory(count, SandboxScriptEngine(sandbox))
    finally:
        sandbox.close()


# =============================================================================================
# (b) and (c): end to end

class Load:
    """``concurrency`` threads, one requests.Session each, POSTing webhook starts."""

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
        session = requests.Session()
        body = json.dumps(START_DATA).encode()
        headers = {"Content-Type": "application/json"}
        while self._ticket(deadline):
            started = time.perf_counter()
            try:
                response = session.post(self.url, data=body, headers=headers, timeout=60)
                latency = time.perf_counter() - started
                ok = response.status_code == 202
                instance_id = response.json().get("instance_id") if ok else None
                problem = None if ok else f"HTTP {response.status_code}: {response.text[:200]}"
            except requests.RequestException as exc:
                latency, instance_id, problem = time.perf_counter() - started, None, repr(exc)
            with self.lock:
                if problem is None:
                    self.latencies.append(latency)
                    self.instance_ids.append(instance_id)
                    self.last_accepted = time.time()
                else:
                    self.errors.append(problem)
        session.close()

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
    total, todo, seen = 0.0, list(pids), set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


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


def _start_workers(server: BatonServer, processes: int, workdir: Path) -> list[subprocess.Popen]:
    workers = []
    for index in range(processes):
        log = open(workdir / f"worker-{index}.log", "w")
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "flask", "--app", "app", "worker", "--threads", "1"],
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


def measure_end_to_end(backend: str, args, workdir: Path, log=print) -> dict:
    """One server (and its workers) on a fresh database; ``args.count`` webhook starts."""
    if backend == "sqlite":
        database_url = f"sqlite:///{workdir / 'bench.db'}"
        worker_processes = args.sqlite_worker_processes
    else:
        database_url = create_postgres_database()
        worker_processes = 2
    env = {"BATON_WORKERS": "0"} if worker_processes else {}
    env.update(args.server_env)
    server = BatonServer(database_url, workdir, **env)
    workers: list[subprocess.Popen] = []
    try:
        server.start()
        tenant = f"bench-{uuid.uuid4().hex[:8]}"
        key = server.create_tenant(tenant)
        deployed = server.api(key).deploy(bpmn(BPMN_FILE.name), code="bench-order")
        url = deployed["webhooks"][0]["url"]
        if worker_processes:
            workers = _start_workers(server, worker_processes, workdir)
        # A few instances end to end first, not counted: the spec cache, the sandbox hosts and
        # the connection pools are warm before the clock starts.
        warm_ids = [requests.post(url, json=START_DATA, timeout=30).json()["instance_id"]
                    for _ in range(4)]
        wait_until_completed(database_url, min(warm_ids) - 1, len(warm_ids), 30)
        after_id = max(warm_ids)

        log(f"  {backend}: {args.count} webhook starts, {args.concurrency} clients ...")
        load = Load(url, args.count, args.concurrency, args.max_seconds)
        pids = [server.process.pid] + [w.pid for w in workers]
        server_cpu, client_cpu = tree_cpu_seconds(pids), time.process_time()
        load.run()
        client_cpu = time.process_time() - client_cpu
        accepted = len(load.instance_ids)
        if accepted == 0:
            raise RuntimeError(f"no webhook start was accepted: {load.errors[:3]}")
        done = wait_until_completed(database_url, after_id, accepted, args.drain_timeout)
        server_cpu = tree_cpu_seconds(pids) - server_cpu
        completed = done["counts"].get("completed", 0)
        end = done["last_completed"] or done["observed_at"]
        elapsed = end - load.first_sent
        accept_s = load.last_accepted - load.first_sent
        lat = load.latencies
        result = {
            "backend": backend,
            "topology": (f"server BATON_WORKERS=0 + {worker_processes} `flask worker` processes"
                         if worker_processes else
                         f"server with in-process workers (BATON_WORKERS={env.get('BATON_WORKERS', 'default 2')})"),
            "requested": args.count, "accepted": accepted, "completed": completed,
            "statuses": done["counts"], "http_errors": len(load.errors),
            "first_errors": load.errors[:3],
            "concurrency": args.concurrency,
            "seconds": round(elapsed, 3),
            "per_s": round(completed / elapsed, 1) if elapsed > 0 else None,
            "accept_per_s": round(accepted / accept_s, 1) if accept_s > 0 else None,
            "drain_after_last_accept_s": round(end - load.last_accepted, 3),
            # Baton's processes (server, workers, sandbox hosts) and this client, per instance:
            # with 2 cores the two share 2 x seconds of CPU.
            "server_cpu_ms_per_instance": round(1000 * server_cpu / max(completed, 1), 2),
            "client_cpu_ms_per_instance": round(1000 * client_cpu / max(accepted, 1), 2),
            "accept_latency_ms": {"p50": round(_percentile(lat, 50) * 1000, 1),
                                  "p99": round(_percentile(lat, 99) * 1000, 1),
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

def _git_commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _versions() -> dict:
    import sqlite3
    from importlib.metadata import version

    return {"python": platform.python_version(), "SpiffWorkflow": version("SpiffWorkflow"),
            "sqlite": sqlite3.sqlite_version, "waitress": version("waitress")}


def print_table(report: dict) -> None:
    raw = report["raw"]["per_s"]
    rows = [("(a)  raw SpiffWorkflow, in memory", report["raw"], None),
            ("(a') with Baton's sandbox, in memory", report["sandboxed"], None)]
    names = {"sqlite": "(b)  end to end, SQLite", "postgresql": "(c)  end to end, PostgreSQL"}
    for backend, result in report["end_to_end"].items():
        rows.append((names[backend], result, result.get("accept_latency_ms")))
    print()
    print(f"{'':40} {'inst/s':>9} {'ratio':>7} {'accept p50':>11} {'p99':>9}   instances")
    for name, result, latency in rows:
        if "error" in result:
            print(f"{name:40} {'failed':>9}   {result['error']}")
            continue
        ratio = result["per_s"] / raw
        p50 = f"{latency['p50']:.1f} ms" if latency else ""
        p99 = f"{latency['p99']:.1f} ms" if latency else ""
        count = result.get("completed", result["instances"] if "instances" in result else "")
        print(f"{name:40} {result['per_s']:>9.1f} {ratio:>7.3f} {p50:>11} {p99:>9}   {count}")
    print()
    for backend, ratio in report["ratios"].items():
        print(f"  {ratio['name']} = {ratio['value']:.3f}" + (f"   (target >= {ratio['target']:.2f}: "
              f"{'met' if ratio['met'] else 'NOT met'})" if "target" in ratio else ""))
    for backend, result in report["end_to_end"].items():
        if "error" not in result:
            print(f"  {backend}: {result['topology']}, {result['concurrency']} clients")
            print(f"  {backend}: accepted {result['accept_per_s']}/s while loading; drained "
                  f"{result['drain_after_last_accept_s']} s after the last accept; "
                  f"statuses {result['statuses']}; HTTP errors {result['http_errors']}")
            print(f"  {backend}: CPU per instance: Baton {result['server_cpu_ms_per_instance']} ms "
                  f"(server, workers, sandbox hosts), bench client {result['client_cpu_ms_per_instance']} ms")
    machine = report["machine"]
    print(f"\n  {machine['cores']} cores (load average {machine['load_average_before'][0]} before, "
          f"{machine['load_average_after'][0]} after), commit {report['git_commit']}, {report['date']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000, help="webhook starts per backend (default 2000)")
    parser.add_argument("--raw-count", type=int, default=None,
                        help="in-memory instances for (a) and (a') (default: --count)")
    parser.add_argument("--concurrency", type=int, default=16, help="HTTP client threads (default 16)")
    parser.add_argument("--backends", default="sqlite,postgresql",
                        help="comma-separated: sqlite, postgresql (default both)")
    parser.add_argument("--max-seconds", type=float, default=20.0,
                        help="stop sending after this long even if --count is not reached (default 20)")
    parser.add_argument("--drain-timeout", type=float, default=120.0,
                        help="how long to wait for the accepted instances to complete (default 120)")
    parser.add_argument("--sqlite-worker-processes", type=int, default=0, metavar="N",
                        help="SQLite: BATON_WORKERS=0 and N `flask worker` processes instead of the "
                             "embedded default (they find jobs by polling: set BATON_POLL_S too)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 300 instances, 8 clients")
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
        if backend not in ("sqlite", "postgresql"):
            parser.error(f"unknown backend {backend!r}")

    load_before = os.getloadavg()
    if load_before[0] > (os.cpu_count() or 1) * 0.5:
        print(f"note: the machine is already busy (load average {load_before[0]:.1f} on "
              f"{os.cpu_count()} cores); absolute figures will be low and noisy", flush=True)
    print(f"(a)  raw SpiffWorkflow, {args.raw_count} instances ...", flush=True)
    raw = measure_raw(args.raw_count)
    print(f"(a') Baton's sandbox, {args.raw_count} instances ...", flush=True)
    sandboxed = measure_sandboxed(args.raw_count)
    end_to_end = {}
    for backend in backends:
        workdir = Path(tempfile.mkdtemp(prefix=f"baton-bench-{backend}-"))
        try:
            end_to_end[backend] = measure_end_to_end(backend, args, workdir,
                                                     log=lambda m: print(m, flush=True))
        except Exception as exc:  # noqa: BLE001 - report the others; exit code says it failed
            end_to_end[backend] = {"error": f"{type(exc).__name__}: {exc}"}
            for log_file in sorted(workdir.glob("*.log")):
                print(f"--- {log_file.name}\n{log_file.read_text()[-3000:]}", file=sys.stderr)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    ratios = {"sandboxed": {"name": "a'/a (sandbox)", "value": sandboxed["per_s"] / raw["per_s"]}}
    letters = {"sqlite": "b/a", "postgresql": "c/a"}
    for backend, result in end_to_end.items():
        if "error" not in result:
            ratio = {"name": f"{letters[backend]} ({backend} end to end)",
                     "value": result["per_s"] / raw["per_s"]}
            if backend == "sqlite":
                ratio.update(target=TARGET_SQLITE_RATIO, met=ratio["value"] >= TARGET_SQLITE_RATIO)
            ratios[backend] = ratio
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), **_versions(),
                    "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "options": {"count": args.count, "raw_count": args.raw_count, "concurrency": args.concurrency,
                    "sqlite_worker_processes": args.sqlite_worker_processes,
                    "backends": backends, "quick": args.quick, "max_seconds": args.max_seconds,
                    "server_env": args.server_env},
        "raw": raw, "sandboxed": sandboxed, "end_to_end": end_to_end,
        "ratios": {k: {**v, "value": round(v["value"], 3)} for k, v in ratios.items()},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    print(f"  written to {args.output}")
    failed = any("error" in r or "incomplete" in r or r.get("http_errors") for r in end_to_end.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
