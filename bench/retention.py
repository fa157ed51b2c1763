"""Retention: the bytes a completed instance takes, and what purging many of them costs.

For each backend (fresh database, `flask --app app serve` with its in-process workers and
BATON_RETENTION_DAYS=0, so that nothing is purged behind the bench's back):

  1. database size before and after --count webhook starts of tests/bpmn/webhook_order.bpmn
     (start -> script -> XOR -> end), all completed: bytes per completed instance
     (SQLite: used pages after a WAL checkpoint; PostgreSQL: pg_database_size and the sum of
     pg_total_relation_size of Baton's tables);
  2. those instances' end moved 31 days back (an UPDATE: as if they had ended then);
  3. the baseline: one client starting instances through the webhook, one after another, for
     --probe-seconds, with nothing else running: its latency (p50, p99, max);
  4. the purge: `engine.retention.Purging` as `flask --app app retention` runs it (`cli.purge_now`:
     one unit of work per batch, a rest after each), in this process, in batches of --batch instances, while the same client goes on: total time,
     the longest batch (a transaction: how long it holds its locks), and the client's latency
     during the purge against the baseline (the ratio is the figure; absolute times depend on
     the machine);
  5. the size after the purge (freed pages are reused by new rows; the file does not shrink
     without VACUUM).

    python bench/retention.py                         # 20,000 instances on SQLite and PostgreSQL
    python bench/retention.py --count 2000 --backends sqlite
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import requests  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from bench.common import percentile, run_header  # noqa: E402
from bench.throughput import START_DATA, Load, wait_until_completed  # noqa: E402
from tests.harness import BatonServer, bpmn, create_postgres_database, drop_postgres_database  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "retention-latest.json"
TABLES = ("instances", "jobs", "tasks", "external_tasks", "event_subscriptions", "conversations", "messages",
          "deliveries", "ai_dialogs", "idempotency_records", "inbound_receipts")


def database_bytes(engine, backend: str) -> dict:
    with engine.connect() as conn:
        if backend == "sqlite":
            conn.exec_driver_sql("PRAGMA wal_checkpoint(FULL)")
            page = conn.exec_driver_sql("PRAGMA page_size").scalar()
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
            free = conn.exec_driver_sql("PRAGMA freelist_count").scalar()
            return {"used": (pages - free) * page, "file": pages * page, "free_pages": free}
        tables = conn.execute(text("SELECT sum(pg_total_relation_size(c)) FROM unnest(CAST(:t AS regclass[])) c"),
                              {"t": list(TABLES)}).scalar()
        whole = conn.execute(text("SELECT pg_database_size(current_database())")).scalar()
        return {"used": int(tables), "database": int(whole)}


class Prober:
    """One client starting instances through the webhook, one after another, until stopped."""

    def __init__(self, url: str, pause_s: float = 0.01):
        self.url, self.pause_s = url, pause_s
        self.latencies: list[tuple[float, float]] = []  # (monotonic time sent, seconds)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        http = requests.Session()
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                ok = http.post(self.url, json=START_DATA, timeout=60).status_code == 202
            except requests.RequestException:
                ok = False
            if ok:
                self.latencies.append((sent, time.monotonic() - sent))
            else:
                self.errors += 1
            time.sleep(self.pause_s)

    def start(self) -> "Prober":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def between(self, begin: float, end: float) -> list[float]:
        return [seconds for sent, seconds in self.latencies if begin <= sent < end]


def summary_ms(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(percentile(values, 50) * 1000, 1),
            "p99": round(percentile(values, 99) * 1000, 1), "max": round(max(values) * 1000, 1)}


def measure(backend: str, args, workdir: Path, log=print) -> dict:
    database_url = (f"sqlite:///{workdir / 'retention.db'}" if backend == "sqlite" else create_postgres_database())
    server = BatonServer(database_url, workdir, BATON_RETENTION_DAYS="0")
    engine = create_engine(database_url)
    try:
        server.start()
        api = server.api(server.create_tenant("bench-retention"))
        url = api.deploy(bpmn("webhook_order.bpmn"), code="order")["webhooks"][0]["url"]
        warm = [requests.post(url, json=START_DATA, timeout=30).json()["instance_id"] for _ in range(4)]
        wait_until_completed(database_url, min(warm) - 1, len(warm), 30)
        before = database_bytes(engine, backend)

        log(f"  {backend}: {args.count} instances ...")
        load = Load(url, args.count, args.concurrency, max_seconds=1800)
        load.run()
        done = wait_until_completed(database_url, max(warm), len(load.instance_ids), 600)
        completed = done["counts"].get("completed", 0)
        filled = database_bytes(engine, backend)
        per_instance = (filled["used"] - before["used"]) / completed
        log(f"  {backend}: {per_instance:.0f} bytes per completed instance")

        long_ago = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(days=31)
        with engine.begin() as conn:
            aged = conn.execute(text("UPDATE instances SET completed_at = :t WHERE status = 'completed'"),
                                {"t": long_ago}).rowcount

        from app import create_app
        from cli import purge_now
        from engine.store.db import db

        app = create_app({"database_url": database_url, "workers": 0, "retention_days": 0})
        prober = Prober(url).start()
        time.sleep(args.probe_seconds)
        purge_began = time.monotonic()
        with app.app_context():
            report = purge_now(app.extensions["baton.units"], dt.timedelta(days=30), batch_size=args.batch,
                               rest=args.rest)
            db.session.remove()
            db.engine.dispose()
        purge_ended = time.monotonic()
        time.sleep(1.0)
        prober.stop()
        baseline = prober.between(purge_began - args.probe_seconds, purge_began)
        during = prober.between(purge_began, purge_ended)
        api.wait_until_idle(120)
        after = database_bytes(engine, backend)
        batches = report.batch_seconds
        result = {
            "backend": backend, "instances": completed, "batch": args.batch, "rest": args.rest,
            "bytes_per_instance": round(per_instance), "size_before": before, "size_filled": filled,
            "size_after_purge": after, "aged": aged, "removed": dict(report.removed),
            "purge_seconds": round(purge_ended - purge_began, 3),
            "instances_per_s": round(report.removed["instances"] / (purge_ended - purge_began), 1),
            "transactions": len(batches),
            "batch_ms": {"p50": round(percentile(batches, 50) * 1000, 1), "max": round(max(batches) * 1000, 1)},
            "start_latency_ms": {"baseline": summary_ms(baseline), "during_purge": summary_ms(during)},
            "probe_errors": prober.errors,
        }
        b, d = result["start_latency_ms"]["baseline"], result["start_latency_ms"]["during_purge"]
        if b.get("n") and d.get("n"):
            result["ratios"] = {"p50": round(d["p50"] / b["p50"], 2), "p99": round(d["p99"] / b["p99"], 2),
                                "longest_batch_over_baseline_p50": round(result["batch_ms"]["max"] / b["p50"], 2)}
        return result
    finally:
        engine.dispose()
        server.stop()
        if backend == "postgresql":
            drop_postgres_database(database_url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=200, help="instances per transaction (BATON_RETENTION_BATCH)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rest", type=float, default=1.0, help="rest after each batch, times its duration")
    parser.add_argument("--probe-seconds", type=float, default=10.0)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    results = []
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory(prefix=f"baton-retention-{backend}-") as workdir:
            results.append(measure(backend, args, Path(workdir)))
    report = {**run_header(load_before, postgresql="postgresql" in args.backends),
              "command": "python bench/retention.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "results": results}
    print()
    print(f"{'backend':11} {'inst':>6} {'B/inst':>7} {'purge s':>8} {'inst/s':>8} {'tx':>5} {'batch p50':>10} "
          f"{'max':>8}   start latency p50/p99 ms: baseline -> during purge (ratio)")
    for r in results:
        b, d = r["start_latency_ms"]["baseline"], r["start_latency_ms"]["during_purge"]
        ratios = r.get("ratios", {})
        print(f"{r['backend']:11} {r['instances']:>6} {r['bytes_per_instance']:>7} {r['purge_seconds']:>8} "
              f"{r['instances_per_s']:>8} {r['transactions']:>5} {r['batch_ms']['p50']:>8} ms {r['batch_ms']['max']:>5} ms"
              f"   {b.get('p50')}/{b.get('p99')} -> {d.get('p50')}/{d.get('p99')} "
              f"({ratios.get('p50')}x / {ratios.get('p99')}x)")
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
