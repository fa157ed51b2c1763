"""Baton's own CPU per instance on SQLite or PostgreSQL, one thread, no HTTP, no other thread for the GIL.

    python bench/cpu_path.py                 # 1000 instances of webhook_order.bpmn, 3 rounds, SQLite
    python bench/cpu_path.py --count 2000 --rounds 5
    python bench/cpu_path.py --backend postgresql    # a throwaway PostgreSQL database
    python bench/cpu_path.py --rounds 1 --cprofile 40  # and the 40 functions with the most CPU

A real server deploys ``tests/bpmn/webhook_order.bpmn`` and is stopped; then, in this process, on
the same database: ``channels.webhook.accept`` (the webhook accept, in its unit of work, without
waitress) for ``--count`` instances, then claims (batches of ``WorkerPool.CLAIM_BATCH``) and each
job's ``Runner.handle`` in a unit of work of its own until the queue is empty, as one worker
thread does (without its batched saves). It prints the thread CPU per accept and per
advance of each round and the medians. Far less noisy than ``throughput.py``'s CPU per instance
(no thread switching, no client on the same cores), so it shows changes of a few percent on the
server's path; the sandbox host's own CPU is not counted.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.harness import (BatonServer, bpmn, claim_jobs, create_postgres_database,  # noqa: E402
                            drop_postgres_database)
from engine.jobs.worker import run_job  # noqa: E402

START_DATA = {"amount": 60}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--cprofile", type=int, metavar="N", default=0,
                        help="also print the N functions of the advances with the most thread CPU (cProfile)")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="baton-cpu-path-"))
    url = f"sqlite:///{workdir / 'bench.db'}" if args.backend == "sqlite" else create_postgres_database()
    try:
        return run(args, url, workdir)
    finally:
        if args.backend == "postgresql":
            drop_postgres_database(url)


def run(args, url: str, workdir: Path) -> int:
    server = BatonServer(url, workdir, BATON_WORKERS="0").start()
    try:
        key = server.create_tenant("bench")
        hook = server.api(key).deploy(bpmn("webhook_order.bpmn"), code="bench-order")["webhooks"][0]["url"]
    finally:
        server.stop()
    webhook_id = hook.rsplit("/", 1)[1]

    from app import advance_contributors, create_app
    from channels import webhook as webhook_door
    from engine import webhooks
    from engine.jobs.worker import WorkerPool
    from engine.runtime.runner import Runner
    from engine.sandbox import Sandbox, SandboxScriptEngine
    from engine.store.db import db
    from engine.store.workflows import SpecCache

    app = create_app({"database_url": url, "workers": 0})
    print(f"{args.backend}: {args.count} instances per round")
    accepts, advances = [], []
    units = app.extensions["baton.units"]
    with app.app_context():
        sandbox = Sandbox(hosts=1)
        runner = Runner(SandboxScriptEngine(sandbox), SpecCache(), advance_contributors("http://127.0.0.1"))
        body = json.dumps(START_DATA).encode()

        def accept() -> None:
            webhook_door.accept(units, webhooks.WebhookCall(webhook_id, body, START_DATA))

        def drain() -> int:
            done = 0
            while claimed := claim_jobs(units, "bench", 30, limit=WorkerPool.CLAIM_BATCH):
                for job in claimed:
                    run_job(units, runner, job, "bench")
                    done += 1
                db.session.remove()
            return done

        profile = cProfile.Profile(time.thread_time) if args.cprofile else None
        try:
            for _ in range(20):  # warm: spec cache, sandbox host, connections
                accept()
            drain()
            for round_ in range(1, args.rounds + 1):
                started = time.thread_time()
                for _ in range(args.count):
                    accept()
                accepted = time.thread_time()
                if profile is not None:
                    profile.enable()
                advanced = drain()
                if profile is not None:
                    profile.disable()
                finished = time.thread_time()
                if advanced != args.count:
                    raise SystemExit(f"advanced {advanced} jobs, expected {args.count}")
                accepts.append(1000 * (accepted - started) / args.count)
                advances.append(1000 * (finished - accepted) / args.count)
                print(f"round {round_}: accept {accepts[-1]:.3f} ms  advance {advances[-1]:.3f} ms  "
                      f"total {accepts[-1] + advances[-1]:.3f} ms of thread CPU per instance")
            from sqlalchemy import text
            statuses = dict(db.session.execute(text("SELECT status, count(*) FROM instances GROUP BY status")).all())
            db.session.rollback()
        finally:
            sandbox.close()
            db.engine.dispose()
    print(f"median of {args.rounds}: accept {statistics.median(accepts):.3f} ms  advance "
          f"{statistics.median(advances):.3f} ms  total "
          f"{statistics.median(a + b for a, b in zip(accepts, advances)):.3f} ms  (statuses {statuses})")
    if profile is not None:  # cProfile slows the advances: the figures above are then not comparable
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.cprofile)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(args.cprofile)
        if os.environ.get("BATON_PROFILE_DUMP"):
            profile.dump_stats(os.environ["BATON_PROFILE_DUMP"])
    return 0 if set(statuses) == {"completed"} else 1


if __name__ == "__main__":
    sys.exit(main())
