"""CPU per request of the request layer (request id, request metrics) and of the rate limits.

    python bench/request_overhead.py                         # SQLite and PostgreSQL, 2000 requests x 5 rounds
    python bench/request_overhead.py --backends sqlite --count 500 --rounds 3

In this process, on a fresh database with a tenant and ``tests/bpmn/webhook_order.bpmn`` deployed
(no workers, no HTTP server: each request is one WSGI call, so only Baton's own code is timed),
three variants of the same app answer the same requests, interleaved request by request (so a
table that grows under the webhook starts, or the machine's other load, moves all three alike):

- ``bare``: the app under the request layer (the webhook door, Flask), rate limits off;
- ``layer``: the whole app as served (``RequestLayer`` outermost), rate limits off;
- ``limited``: the whole app with both rate limits on (at a rate never reached).

for three requests: a webhook start (the thin door: the hottest request), ``process.status`` over
JSON-RPC (Flask, the key's check, one indexed read) and ``GET /healthz`` (the least Flask does). It prints the
thread CPU and wall time per request (median of the rounds) and each variant's ratio to ``bare``,
and the cost of the metrics an advance records, per advance.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import ROOT as _ROOT, git_commit  # noqa: E402,F401
from tests.harness import bpmn, create_postgres_database, drop_postgres_database  # noqa: E402

VARIANTS = ("bare", "layer", "limited")


def build(url: str):
    """The three WSGI callables on one database, and the requests (environ factories) to send them."""
    from werkzeug.test import EnvironBuilder

    from app import create_app
    from engine import definitions, instances
    from engine.auth import create_tenant

    off = create_app({"database_url": url, "workers": 0})
    on = create_app({"database_url": url, "workers": 0, "rate_limit_per_key": 1e9, "rate_limit_per_webhook": 1e9})
    with off.app_context(), off.extensions["baton.units"].begin("bench") as uow:
        tenant, key = create_tenant(uow, "bench")
        deployed = definitions.deploy(uow, tenant.id, bpmn("webhook_order.bpmn"), "bench-order",
                                      public_url="http://127.0.0.1")
        hook = deployed["webhooks"][0]["webhook_id"]
        definition = instances.resolve_definition(uow, tenant.id, deployed["definition_id"])
        instance_id = instances.start(uow, tenant.id, definition, {"amount": 60})["instance_id"]
    apps = {"bare": off.wsgi_app.wsgi_app, "layer": off.wsgi_app, "limited": on.wsgi_app}
    rpc_body = json.dumps({"jsonrpc": "2.0", "method": "process.status", "params": {"instance_id": instance_id},
                           "id": 1})
    requests = {
        "webhook start": lambda: EnvironBuilder(f"/webhooks/inbound/{hook}", method="POST",
                                                data=b'{"amount": 60}', content_type="application/json").get_environ(),
        "process.status": lambda: EnvironBuilder("/v1/rpc", method="POST", data=rpc_body,
                                               content_type="application/json",
                                               headers={"X-API-Key": key}).get_environ(),
        "GET /healthz": lambda: EnvironBuilder("/healthz").get_environ(),
    }
    return apps, requests


def answer(wsgi, environ) -> tuple[float, float]:
    """Thread CPU and wall seconds of answering one request."""
    statuses = []
    cpu, wall = time.thread_time(), time.perf_counter()
    body = wsgi(environ, lambda status, headers, exc_info=None: statuses.append(status))
    b"".join(body)
    if hasattr(body, "close"):
        body.close()
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    if not statuses[0].startswith(("200", "202")):
        raise SystemExit(f"unexpected answer: {statuses[0]}")
    return cpu, wall


def measure(backend: str, url: str, count: int, rounds: int) -> dict:
    apps, requests = build(url)
    results = {}
    for name, make in requests.items():
        for _ in range(50):  # warm: caches, connections
            for variant in VARIANTS:
                answer(apps[variant], make())
        cpu = {v: [] for v in VARIANTS}
        wall = {v: [] for v in VARIANTS}
        for _ in range(rounds):
            spent = {v: [0.0, 0.0] for v in VARIANTS}
            for _ in range(count):
                for variant in VARIANTS:
                    one_cpu, one_wall = answer(apps[variant], make())
                    spent[variant][0] += one_cpu
                    spent[variant][1] += one_wall
            for variant in VARIANTS:
                cpu[variant].append(1e6 * spent[variant][0] / count)
                wall[variant].append(1e6 * spent[variant][1] / count)
        row = {v: {"cpu_us": statistics.median(cpu[v]), "wall_us": statistics.median(wall[v])} for v in VARIANTS}
        for v in VARIANTS:
            row[v]["cpu_ratio"] = row[v]["cpu_us"] / row["bare"]["cpu_us"]
            row[v]["cpu_added_us"] = row[v]["cpu_us"] - row["bare"]["cpu_us"]
        results[name] = row
        print(f"{backend:10} {name:14} " + "  ".join(
            f"{v} {row[v]['cpu_us']:7.1f} µs cpu ({row[v]['cpu_ratio']:.3f}) {row[v]['wall_us']:7.1f} µs wall"
            for v in VARIANTS), flush=True)
    return results


def advance_metrics(count: int = 200_000) -> float:
    """µs of CPU for what one finished advance records: its histogram, a start and an end counter."""
    from engine.telemetry import metrics

    started = time.thread_time()
    for _ in range(count):
        metrics.ADVANCE_SECONDS.labels("start").observe(0.004)
        metrics.INSTANCES_STARTED.labels("bench-order").inc()
        metrics.INSTANCES_ENDED.labels("bench-order", "completed").inc()
    return 1e6 * (time.thread_time() - started) / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    report = {"commit": git_commit(), "count": args.count, "rounds": args.rounds, "backends": {}}
    for backend in args.backends.split(","):
        if backend == "sqlite":
            url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='baton-overhead-')) / 'bench.db'}"
            report["backends"][backend] = measure(backend, url, args.count, args.rounds)
        else:
            url = create_postgres_database()
            try:
                report["backends"][backend] = measure(backend, url, args.count, args.rounds)
            finally:
                from engine.store.db import db  # noqa: F401 (connections of the apps end with the process)
                drop_postgres_database(url)
    report["advance_metrics_us"] = advance_metrics()
    print(f"metrics of one finished advance (histogram + started + ended): {report['advance_metrics_us']:.2f} µs")
    out = ROOT / "bench" / "results" / "request-overhead-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
