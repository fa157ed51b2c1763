"""The long fuzz run: the fuzz suite's hostile requests (tests/fuzz_cases.py), many more of them.

    .venv/bin/python bench/fuzz.py --requests 100000                 # SQLite, then PostgreSQL
    .venv/bin/python bench/fuzz.py --backend sqlite --requests 20000 --minutes 15

Against one real server per database (a fresh database each), rounds of: every JSON-RPC method's
params, envelopes and batches, webhook, web-chat and task-callback bodies, until the requests (per
database) or the time run out. Counts every answer instead of stopping at the first bad one: the
requests, ``internal`` answers, 5xx answers, answers not in the JSON error shape, and whether the
tenant's task.list / process.list / process.status still answered at the end. Prints them and
writes bench/results/fuzz-latest.json; the exit code is 1 when anything was counted bad.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bench.common import run_header  # noqa: E402
from tests import fuzz_cases  # noqa: E402
from tests.harness import BatonServer, create_postgres_database, drop_postgres_database  # noqa: E402
from tests.receiver import Receiver  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "fuzz-latest.json"


def chunk(examples: int):
    return settings(max_examples=examples, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def one_round(target, methods, judges: dict[str, fuzz_cases.Judge], scale: int) -> None:
    """One pass over every door; Hypothesis draws afresh each time (no fixed seed)."""
    def params_of(method):
        @chunk(4 * scale)
        @given(data=st.data())
        def params(data):
            judges["methods"].rpc(target.rpc(data.draw(fuzz_cases.method_body(target.world, methods, method))), method)
        return params

    for method in sorted(methods):
        params_of(method)()

    @chunk(60 * scale)
    @given(data=st.data())
    def envelopes(data):
        judges["envelopes"].rpc(target.rpc(data.draw(fuzz_cases.rpc_body(target.world, methods))), "envelope")

    @chunk(50 * scale)
    @given(data=st.data())
    def webhooks(data):
        body = data.draw(fuzz_cases.webhook_bodies())
        content_type = data.draw(st.sampled_from(fuzz_cases.CONTENT_TYPES))
        webhook_id = data.draw(st.one_of(st.none(), st.none(), st.sampled_from(["%00", "x" * 300, "nope"])))
        judges["webhooks"].http(target.webhook(body, content_type, webhook_id), f"webhook {body[:200]!r}")

    @chunk(40 * scale)
    @given(data=st.data())
    def webchat(data):
        body = data.draw(fuzz_cases.webchat_bodies())
        content_type = data.draw(st.sampled_from(fuzz_cases.CONTENT_TYPES))
        judges["webchat"].http(target.webchat(body, content_type), f"webchat {body[:200]!r}")

    @chunk(30 * scale)
    @given(data=st.data())
    def callbacks(data):
        task_id, token = data.draw(st.sampled_from(target.callbacks))
        token = data.draw(st.one_of(st.just(token), st.just("wrong")))
        body = data.draw(fuzz_cases.callback_bodies())
        content_type = data.draw(st.sampled_from(fuzz_cases.CONTENT_TYPES))
        judges["callbacks"].http(target.callback(task_id, token, body, content_type), f"callback {body[:200]!r}")

    for run in (envelopes, webhooks, webchat, callbacks):
        run()


def fuzz_backend(backend: str, requests_wanted: int, deadline: float, scale: int) -> dict:
    url = f"sqlite:///{tempfile.mkdtemp(prefix='baton-fuzz-')}/baton.db" if backend == "sqlite" \
        else create_postgres_database()
    server = BatonServer(url, Path(tempfile.mkdtemp(prefix="baton-fuzz-server-"))).start()
    receiver = Receiver().start()
    judges = {door: fuzz_cases.Judge(strict=False)
              for door in ("methods", "envelopes", "webhooks", "webchat", "callbacks")}
    started = time.monotonic()
    try:
        target = fuzz_cases.Target(server, receiver)
        methods = fuzz_cases.method_params()
        rounds = 0
        while sum(j.requests for j in judges.values()) < requests_wanted and time.monotonic() < deadline:
            one_round(target, methods, judges, scale)
            rounds += 1
            total = sum(j.requests for j in judges.values())
            print(f"  {backend}: round {rounds}, {total} requests, "
                  f"{sum(j.internal for j in judges.values())} internal, "
                  f"{sum(j.server_errors for j in judges.values())} 5xx", flush=True)
        try:
            target.tenant_still_answers()
            still_answers = True
        except Exception as exc:  # noqa: BLE001 - counted, and shown
            print(f"  the tenant no longer answers: {exc}")
            still_answers = False
    finally:
        receiver.stop()
        server.stop()
        if backend == "postgresql":
            drop_postgres_database(url)
    totals = {key: sum(j.summary()[key] for j in judges.values())
              for key in ("requests", "internal", "server_errors", "bad_shape")}
    return {**totals, "rounds": rounds, "seconds": round(time.monotonic() - started, 1),
            "tenant_still_answers": still_answers, "by_door": {door: j.summary() for door, j in judges.items()},
            "first_failures": [f for j in judges.values() for f in j.failures][:20]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--requests", type=int, default=int(os.environ.get("BATON_FUZZ_EXAMPLES", "100000")),
                        help="requests per database (default 100000, or BATON_FUZZ_EXAMPLES)")
    parser.add_argument("--minutes", type=float, default=120.0, help="stop each database after this long")
    parser.add_argument("--scale", type=int, default=5, help="examples per door in one round, x this")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"where to write them (default {RESULTS})")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # Hypothesis's notes about slow data generation are not results
    load_before = os.getloadavg()
    results = {}
    for backend in (["sqlite", "postgresql"] if args.backend == "both" else [args.backend]):
        print(f"fuzzing {backend}: up to {args.requests} requests or {args.minutes} min", flush=True)
        results[backend] = fuzz_backend(backend, args.requests, time.monotonic() + args.minutes * 60, args.scale)
        r = results[backend]
        print(f"{backend}: {r['requests']} requests in {r['seconds']} s ({r['requests'] / r['seconds']:.0f}/s): "
              f"{r['internal']} internal, {r['server_errors']} 5xx, {r['bad_shape']} not the JSON error shape; "
              f"tenant still answers: {r['tenant_still_answers']}")
        for failure in r["first_failures"]:
            print("   ", failure)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps({**run_header(load_before, postgresql="postgresql" in results),
                                   "command": " ".join(["bench/fuzz.py", *sys.argv[1:]]), "results": results},
                                  indent=2) + "\n")
    bad = any(r["internal"] or r["server_errors"] or r["bad_shape"] or not r["tenant_still_answers"]
              for r in results.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
