"""The scale-out curve on PostgreSQL: what more worker and web processes buy on this machine.

Part 1, end to end: the `order` process (webhook start -> script -> XOR -> end) started over
HTTP by concurrent keep-alive clients, for every combination of

  web processes     1, 2      gunicorn -k gthread (`BATON_WORKERS=0 gunicorn -w N 'app:create_server_app()'`)
  worker processes  1, 2, 4   `flask --app app worker --threads 1`

each on a fresh database, measuring instances/s (first request -> last instance completed),
Baton's CPU per instance (web processes, workers, their sandbox hosts), PostgreSQL's CPU per
instance (the server processes of this database's connections), and how busy the whole machine
was (all cores, everything running on it).

Part 2, the jobs table alone: a backlog of --backlog jobs (100,000) of a kind whose handler does
nothing, drained by --queue-workers worker processes (8) that claim (up to 4 per claim, as a
worker does) and delete each job as an advance's save does (one statement); jobs/s, PostgreSQL CPU per job, and a
check that every job was finished exactly once (none lost, none twice).

The table marks the saturation point for each number of web processes: the worker-process count
after which more worker processes add less than 10 % throughput. Ratios are against the 1 web + 1 worker row of the same run. Results
go to bench/results/scale-latest.json.

    python bench/scale.py                        # both parts (~4 minutes)
    python bench/scale.py --count 600 --backlog 20000 --quick-queue
    python bench/scale.py --part queue
    python bench/scale.py --report              # print the table of the last results file again
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
import requests  # noqa: E402

from bench.common import process_cpu_s, run_header  # noqa: E402
from bench.throughput import (PROCESSES, START_DATA, Load, _start_workers, _stop,  # noqa: E402
                              tree_cpu_seconds, wait_until_completed)
from tests.harness import (POSTGRES_ADMIN_DSN, Api, BatonServer, claim_jobs,  # noqa: E402
                           create_postgres_database, drop_postgres_database, free_port)

RESULTS = ROOT / "bench" / "results" / "scale-latest.json"
NOOP_KIND = "bench_noop"


# -- measuring ---------------------------------------------------------------------------------

class DatabaseCpu:
    """CPU of the PostgreSQL server processes serving one database's connections (readable when
    the server runs on this machine; 0 otherwise)."""

    def __init__(self, database: str):
        self.database = database
        self.start: dict[int, float] = {}

    def _pids(self) -> list[int]:
        with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as conn:
            return [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s",
                                                   (self.database,))]

    def begin(self) -> None:
        self.start = {pid: process_cpu_s(pid) for pid in self._pids()}

    def seconds(self) -> float:
        return sum(process_cpu_s(pid) - self.start.get(pid, 0.0) for pid in self._pids())


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


class MachineBusy:
    def __enter__(self):
        self.before = _machine_ticks()
        return self

    def __exit__(self, *exc):
        busy, total = _machine_ticks()
        self.share = (busy - self.before[0]) / max(1, total - self.before[1])


# -- part 1: end to end --------------------------------------------------------------------------

class Gunicorn:
    """``gunicorn -k gthread -w N 'app:create_server_app()'`` with BATON_WORKERS=0 (web only)."""

    def __init__(self, database_url: str, workdir: Path, web_processes: int, env: dict[str, str]):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.web_processes = web_processes
        self.env = {**env, "BATON_PUBLIC_URL": self.base_url}
        self.log_path = workdir / f"gunicorn-{self.port}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> "Gunicorn":
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-k", "gthread", "--threads", "8", "-w", str(self.web_processes),
                 "-b", f"127.0.0.1:{self.port}", "app:create_server_app()"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited: {self.log_path.read_text()[-2000:]}")
            try:
                if requests.get(self.base_url + "/readyz", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn did not start: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def measure_topology(web_processes: int, worker_processes: int, args, log=print) -> dict:
    database_url = create_postgres_database()
    database = database_url.rsplit("/", 1)[1]
    workdir = Path(tempfile.mkdtemp(prefix="baton-bench-scale-"))
    # BatonServer only lends its environment and its `flask` commands here (it is never started).
    helper = BatonServer(database_url, workdir, BATON_WORKERS="0")
    env = {name: value for name, value in helper.env.items()
           if name not in ("PROMETHEUS_MULTIPROC_DIR", "BATON_METRICS_DIR_MADE")}
    web = Gunicorn(database_url, workdir, web_processes, env)
    helper.env = web.env
    workers: list[subprocess.Popen] = []
    try:
        key = helper.create_tenant(f"scale-{uuid.uuid4().hex[:6]}")  # also migrates the database
        web.start()
        process = PROCESSES["order"]
        url = Api(web.base_url, key).deploy(process.path.read_text(encoding="utf-8"),
                                            code="scale-order")["webhooks"][0]["url"]
        workers = _start_workers(helper, worker_processes, workdir)
        warm = [requests.post(url, json=START_DATA, timeout=30).json()["instance_id"] for _ in range(8)]
        wait_until_completed(database_url, min(warm) - 1, len(warm), 60)
        log(f"  {web_processes} web + {worker_processes} worker processes: {args.count} webhook starts ...")
        pids = [web.process.pid] + [w.pid for w in workers]
        database_cpu = DatabaseCpu(database)
        database_cpu.begin()
        baton_cpu, web_cpu = tree_cpu_seconds(pids), tree_cpu_seconds(pids[:1])
        with MachineBusy() as machine:
            load = Load(url, args.count, args.concurrency, args.max_seconds)
            load.run()
            done = wait_until_completed(database_url, max(warm), len(load.instance_ids), args.drain_timeout)
        baton_cpu, web_cpu = tree_cpu_seconds(pids) - baton_cpu, tree_cpu_seconds(pids[:1]) - web_cpu
        pg_cpu = database_cpu.seconds()
        completed = done["counts"].get("completed", 0)
        elapsed = (done["last_completed"] or done["observed_at"]) - load.first_sent
        return {"web_processes": web_processes, "worker_processes": worker_processes,
                "accepted": len(load.instance_ids), "completed": completed, "http_errors": len(load.errors),
                "seconds": round(elapsed, 3), "per_s": round(completed / elapsed, 1),
                "baton_cpu_ms_per_instance": round(1000 * baton_cpu / max(1, completed), 2),
                "web_cpu_ms_per_instance": round(1000 * web_cpu / max(1, completed), 2),
                "worker_cpu_ms_per_instance": round(1000 * (baton_cpu - web_cpu) / max(1, completed), 2),
                "postgres_cpu_ms_per_instance": round(1000 * pg_cpu / max(1, completed), 2),
                "machine_busy": round(machine.share, 3)}
    finally:
        _stop(workers)
        web.stop()
        drop_postgres_database(database_url)


# -- part 2: the jobs table alone ---------------------------------------------------------------

def _fill_backlog(database_url: str, count: int) -> None:
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        tenant_id = conn.execute("SELECT id FROM tenants ORDER BY id LIMIT 1").fetchone()[0]
        conn.execute("INSERT INTO jobs (tenant_id, instance_id, kind, payload, run_at, attempts, created_at) "
                     "SELECT %s, NULL, %s, '{}', now() AT TIME ZONE 'utc' - interval '1 minute', 0, "
                     "now() AT TIME ZONE 'utc' FROM generate_series(1, %s)", (tenant_id, NOOP_KIND, count))
        conn.execute("VACUUM ANALYZE jobs")


def _queue_worker(database_url: str, index: int, started, results) -> None:
    """One worker process: claim (batches of 4) and finish no-op jobs until none is left; each
    finish is the deletion an advance's save makes (a unit of work on the driver with a single
    write: one statement in autocommit)."""
    from app import create_app
    from engine.store import writes

    app = create_app({"database_url": database_url, "workers": 0})
    worker_id = f"scale-queue-{os.getpid()}"
    finished: list[int] = []
    lost = 0
    units = app.extensions["baton.units"]
    with app.app_context():
        started.wait()
        while True:
            claimed = claim_jobs(units, worker_id, 60, limit=4)
            if not claimed:
                break
            for job in claimed:
                try:
                    with units.begin("bench", on_driver=True, single_write=True) as uow:
                        writes.finish_job(uow, job.id, worker_id, None)
                    finished.append(job.id)
                except writes.Lost:
                    lost += 1
    results.put((index, finished, lost))


def measure_queue(args, log=print) -> dict:
    database_url = create_postgres_database()
    database = database_url.rsplit("/", 1)[1]
    workdir = Path(tempfile.mkdtemp(prefix="baton-bench-queue-"))
    helper = BatonServer(database_url, workdir, BATON_WORKERS="0")
    try:
        helper.create_tenant("queue")
        log(f"  jobs table: {args.backlog} jobs queued, {args.queue_workers} worker processes draining ...")
        _fill_backlog(database_url, args.backlog)
        context = multiprocessing.get_context("spawn")
        started, results = context.Event(), context.Queue()
        processes = [context.Process(target=_queue_worker, args=(database_url, i, started, results))
                     for i in range(args.queue_workers)]
        for process in processes:
            process.start()
        time.sleep(3.0)  # every process has built its app (spawned interpreters import Baton)
        database_cpu = DatabaseCpu(database)
        database_cpu.begin()
        with MachineBusy() as machine:
            began = time.perf_counter()
            started.set()
            outcomes = [results.get(timeout=args.drain_timeout) for _ in processes]
            elapsed = time.perf_counter() - began
        pg_cpu = database_cpu.seconds()
        for process in processes:
            process.join(30)
        ids = [job_id for _, finished, _ in outcomes for job_id in finished]
        dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn) as conn:
            left = conn.execute("SELECT count(*) FROM jobs WHERE kind = %s", (NOOP_KIND,)).fetchone()[0]
        return {"backlog": args.backlog, "worker_processes": args.queue_workers, "finished": len(ids),
                "finished_twice": len(ids) - len(set(ids)), "lost_leases": sum(o[2] for o in outcomes),
                "left_in_table": left, "seconds": round(elapsed, 2), "jobs_per_s": round(len(ids) / elapsed, 1),
                "postgres_cpu_ms_per_job": round(1000 * pg_cpu / max(1, len(ids)), 3),
                "machine_busy": round(machine.share, 3),
                "per_worker": sorted(len(finished) for _, finished, _ in outcomes)}
    finally:
        drop_postgres_database(database_url)


# -- report ----------------------------------------------------------------------------------------

def saturation(rows: list[dict]) -> list[dict]:
    """Per web-process count: the worker-process count after which one more step adds < 10 %
    (the last one measured if every step added more: no saturation seen)."""
    points = []
    for web in sorted({r["web_processes"] for r in rows}):
        ladder = sorted((r for r in rows if r["web_processes"] == web), key=lambda r: r["worker_processes"])
        point = ladder[0]
        for row in ladder[1:]:
            if row["per_s"] < point["per_s"] * 1.10:
                break
            point = row
        points.append({**point, "saturated": point is not ladder[-1]})
    return points


def print_report(report: dict) -> None:
    rows = report.get("topologies", [])
    if rows:
        base = next((r for r in rows if r["web_processes"] == 1 and r["worker_processes"] == 1), rows[0])
        print()
        print(f"{'web':>4} {'workers':>8} {'inst/s':>8} {'x 1+1':>6} {'CPU/inst: Baton':>16} {'(web':>8} "
              f"{'workers)':>9} {'PostgreSQL':>11} {'machine busy':>13}")
        for r in rows:
            print(f"{r['web_processes']:>4} {r['worker_processes']:>8} {r['per_s']:>8.1f} "
                  f"{r['per_s'] / base['per_s']:>6.2f} {r['baton_cpu_ms_per_instance']:>13.2f} ms "
                  f"{r['web_cpu_ms_per_instance']:>5.2f} ms {r['worker_cpu_ms_per_instance']:>6.2f} ms "
                  f"{r['postgres_cpu_ms_per_instance']:>8.2f} ms {100 * r['machine_busy']:>12.0f}%")
        for point in report.get("saturation") or []:
            if point["saturated"]:
                print(f"  saturation with {point['web_processes']} web: {point['worker_processes']} worker processes "
                      f"({point['per_s']} inst/s, machine {100 * point['machine_busy']:.0f}% busy); more add < 10 %")
            else:
                print(f"  with {point['web_processes']} web: still growing at {point['worker_processes']} worker "
                      f"processes ({point['per_s']} inst/s)")
    queue = report.get("queue")
    if queue:
        print(f"\n  jobs table alone: {queue['finished']} of {queue['backlog']} jobs by {queue['worker_processes']} "
              f"worker processes in {queue['seconds']} s = {queue['jobs_per_s']} jobs/s; PostgreSQL CPU "
              f"{queue['postgres_cpu_ms_per_job']} ms/job; machine {100 * queue['machine_busy']:.0f}% busy; "
              f"finished twice {queue['finished_twice']}, left {queue['left_in_table']}, per worker "
              f"{queue['per_worker']}")
    machine = report["machine"]
    print(f"\n  {machine['cores']} cores (load average {machine['load_average_before'][0]} before, "
          f"{machine['load_average_after'][0]} after), commit {report['git_commit']}, {report['date']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["both", "topologies", "queue"], default="both")
    parser.add_argument("--count", type=int, default=1500, help="webhook starts per configuration (default 1500)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--web", default="1,2", help="web process counts (default 1,2)")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts (default 1,2,4)")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--queue-workers", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--drain-timeout", type=float, default=300.0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--report", action="store_true", help="print the table of --output again, measure nothing")
    args = parser.parse_args(argv)
    if args.report:
        report = json.loads(args.output.read_text())
        if report.get("topologies"):
            report["saturation"] = saturation(report["topologies"])
        print_report(report)
        return 0
    load_before = os.getloadavg()
    report: dict = {}
    if args.part in ("both", "topologies"):
        rows = []
        for web in [int(x) for x in args.web.split(",")]:
            for workers in [int(x) for x in args.workers.split(",")]:
                rows.append(measure_topology(web, workers, args, log=lambda m: print(m, flush=True)))
        report["topologies"] = rows
        report["saturation"] = saturation(rows)
    if args.part in ("both", "queue"):
        report["queue"] = measure_queue(args, log=lambda m: print(m, flush=True))
    report = {**run_header(load_before, postgresql=True), "options": vars(args) | {"output": str(args.output)},
              **report}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print_report(report)
    failed = any(r["completed"] < r["accepted"] or r["http_errors"] for r in report.get("topologies", []))
    queue = report.get("queue")
    if queue and (queue["finished_twice"] or queue["left_in_table"] or queue["finished"] != queue["backlog"]):
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
