"""Statements and transactions per instance on PostgreSQL, counted by the database itself.

The figure that survives a busy machine: CPU and time per instance move with the load of the
other processes on the machine, the number of statements and round trips per instance does not.

  * transactions: ``xact_commit + xact_rollback`` of the database in ``pg_stat_database``
    (any user can read it; the statistics collector publishes it within about half a second);
  * statements: with ``ALTER DATABASE ... SET log_statement = 'all'`` (superuser) every statement
    a Baton process sends is one line of the server's log; the lines of this database that were
    appended during the run are counted and grouped by their first words. Reading the log needs
    read access to it (root or the ``adm`` group on Debian); without it only transactions are
    reported.

    python bench/pg_statements.py                  # order, web process + 2 worker processes, 300 instances
    python bench/pg_statements.py --count 500 --worker-processes 1 --show 20

Results go to bench/results/pg-statements-latest.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
import requests  # noqa: E402

from bench.common import run_header  # noqa: E402
from bench.throughput import (PROCESSES, START_DATA, Load, _start_workers, _stop,  # noqa: E402
                              wait_until_completed)
from tests.harness import (POSTGRES_ADMIN_DSN, BatonServer, create_postgres_database,  # noqa: E402
                           drop_postgres_database)

RESULTS = ROOT / "bench" / "results" / "pg-statements-latest.json"
LOG_CANDIDATES = [Path("/var/log/postgresql/postgresql-15-main.log"), *sorted(Path("/var/log/postgresql").glob("*.log"))]
_STATEMENT = re.compile(r"LOG:  (?:statement|execute [^:]*): (.*)")
_BENCH_OWN = re.compile(r"count\(\*\) FROM instances|max\(completed_at\)|pg_catalog\.version|current_schema|"
                        r"standard_conforming_strings", re.I)


def _log_file() -> Path | None:
    for path in LOG_CANDIDATES:
        try:
            with open(path, "rb"):
                return path
        except OSError:
            continue
    return None


def transactions(database: str) -> int:
    with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        (count,) = conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                                (database,)).fetchone()
    return int(count)


def settled_transactions(database: str, wait_s: float = 3.0) -> int:
    """The counter once it stops moving (the statistics are published with a delay)."""
    last, deadline = transactions(database), time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.6)
        now = transactions(database)
        if now == last:
            break
        last = now
    return last


def _shape(sql: str) -> str:
    """A statement's kind for grouping: its first words, table names kept."""
    words = re.sub(r"\s+", " ", sql.strip()).split(" ")
    head = " ".join(words[:2]).upper()
    table = re.search(r"\b(?:FROM|INTO|UPDATE|LISTEN|pg_notify)\b\W*(\w+)", sql, re.I)
    return f"{head} .. {table.group(1)}" if table and not head.startswith(("BEGIN", "COMMIT", "ROLLBACK")) else head


def measure(count: int = 300, worker_processes: int = 2, threads: int = 1, concurrency: int = 8,
            process_name: str = "order", server_env: dict | None = None, log=print) -> dict:
    """One web process + ``worker_processes`` ``flask worker`` processes on a fresh database;
    ``count`` webhook starts; statements and transactions per completed instance."""
    process = PROCESSES[process_name]
    database_url = create_postgres_database()
    database = database_url.rsplit("/", 1)[1]
    log_path = _log_file()
    workdir = Path(tempfile.mkdtemp(prefix="baton-bench-stmts-"))
    server = BatonServer(database_url, workdir, BATON_WORKERS="0", **(server_env or {}))
    workers: list[subprocess.Popen] = []
    try:
        with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{database}" SET log_statement = \'all\'')
        server.start()
        key = server.create_tenant(f"stmts-{uuid.uuid4().hex[:6]}")
        url = server.api(key).deploy(process.path.read_text(encoding="utf-8"), code=f"bench-{process.name}")["webhooks"][0]["url"]
        workers = _start_workers(server, worker_processes, workdir, threads=threads) if worker_processes else []
        warm = [requests.post(url, json=START_DATA, timeout=30).json()["instance_id"] for _ in range(4)]
        wait_until_completed(database_url, min(warm) - 1, len(warm), 30)
        time.sleep(0.5)  # idle workers settle (their look at the next due job)
        before_xact = settled_transactions(database)
        offset = log_path.stat().st_size if log_path else 0
        load = Load(url, count, concurrency, 60)
        load.run()
        done = wait_until_completed(database_url, max(warm), len(load.instance_ids), 120)
        completed = done["counts"].get("completed", 0)
        time.sleep(0.5)
        after_xact = settled_transactions(database)
        statements: Counter = Counter()
        if log_path is not None:
            marker = f"@{database} "
            with open(log_path, "rb") as handle:
                handle.seek(offset)
                for raw in handle:
                    line = raw.decode(errors="replace")
                    if marker not in line:
                        continue
                    found = _STATEMENT.search(line)
                    # The bench's own polling (wait_until_completed) runs on this database too: not Baton's.
                    if found and not _BENCH_OWN.search(found.group(1)):
                        statements[_shape(found.group(1))] += 1
        result = {"process": process_name, "worker_processes": worker_processes, "threads": threads,
                  "completed": completed,
                  "transactions_per_instance": round((after_xact - before_xact) / max(completed, 1), 2)}
        if log_path is not None:
            total = sum(statements.values())
            result["statements_per_instance"] = round(total / max(completed, 1), 2)
            result["by_kind_per_instance"] = {shape: round(n / max(completed, 1), 3)
                                              for shape, n in statements.most_common()}
        else:
            result["statements_per_instance"] = None
            result["note"] = "the server log is not readable here: transactions only"
        return result
    finally:
        _stop(workers)
        server.stop()
        drop_postgres_database(database_url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--worker-processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--processes", default="order", choices=sorted(PROCESSES))
    parser.add_argument("--show", type=int, default=15, help="statement kinds to list")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    result = measure(args.count, args.worker_processes, args.threads, args.concurrency, args.processes)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({**run_header(load_before, postgresql=True), **result}, indent=2) + "\n")
    print(f"{result['completed']} instances of {result['process']}, web process + {result['worker_processes']} "
          f"worker processes x {result['threads']} thread(s)")
    print(f"  transactions per instance: {result['transactions_per_instance']}")
    print(f"  statements per instance:   {result['statements_per_instance']}")
    for shape, per in list(result.get("by_kind_per_instance", {}).items())[:args.show]:
        print(f"    {per:7.3f}  {shape[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
