"""Receiver outage, full size: how long the backlog takes once a web-chat receiver is back.

For each backend a fresh server (`flask --app app serve`, the real delivery schedule) and database.
First the baseline: ``--chats`` + 1 chats each answered with ``--per-chat`` messages while the
receiver is up (first arrival -> last arrival). Then the outage (tests/outage.py): the receiver
answers 503 for ``--outage-s`` (default 180 s) while ``--chats`` chats are answered, so every chat's
first answer fails at 0, 5 and 35 s and once more at 155 s and waits out its schedule (next attempt
at 755 s); the receiver comes back, one more chat writes, and the drain time is its first success
-> the last arrival. Printed: the drain time, what the schedule alone would have waited (the
earliest next retry when the receiver came back), and the drain's ratio to the baseline.
Results: bench/results/delivery-drain-latest.json.

    python bench/delivery_drain.py                       # 200 answers in 20 chats, 3-minute outage, both backends
    python bench/delivery_drain.py --backends sqlite --outage-s 40 --chats 8 --per-chat 5
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import run_header  # noqa: E402
from tests.harness import BatonServer, create_postgres_database, drop_postgres_database  # noqa: E402
from tests.outage import run_outage  # noqa: E402
from tests.receiver import Receiver  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "delivery-drain-latest.json"
TARGET_S = 10.0   # issue 13: the whole backlog within 10 s of the first success


def measure(backend: str, args, workdir: Path) -> dict:
    url = f"sqlite:///{workdir / backend / 'baton.db'}" if backend == "sqlite" else create_postgres_database()
    (workdir / backend).mkdir(exist_ok=True)
    # The drain alone (a new message's success starts it): no recovery probe, whose 15 s tries would
    # stand in for "the schedule's next retry" (the probe: tests/integration/test_recovery_probe.py).
    server = BatonServer(url, workdir / backend, BATON_DELIVERY_PROBE_S="86400").start()
    receiver = Receiver().start()
    try:
        api = server.api(server.create_tenant("bench"))
        # The same answers as the outage: its chats plus its "first" chat.
        baseline = run_outage(server, api, receiver, chats=args.chats - 1, per_chat=args.per_chat, outage=False)
        receiver.requests.clear()
        outage = run_outage(server, api, receiver, chats=args.chats - 1, per_chat=args.per_chat,
                            down_s=args.outage_s, drain_timeout_s=args.outage_s + 900)
    finally:
        receiver.stop()
        server.stop()
        if backend == "postgresql":
            drop_postgres_database(url)
    ok = outage.messages == outage.expected and not outage.duplicates and not outage.out_of_order
    return {"answers": outage.expected, "chats": args.chats, "outage_s": args.outage_s,
            "drain_s": round(outage.drain_s, 3), "schedule_next_retry_s": round(outage.next_retry_s, 1),
            "baseline_s": round(baseline.drain_s, 3), "drain_to_baseline": round(outage.drain_s / baseline.drain_s, 2),
            "all_once_in_order": ok, "duplicates": len(outage.duplicates),
            "chats_out_of_order": len(outage.out_of_order), "target_met": ok and outage.drain_s < TARGET_S}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--chats", type=int, default=20, help="chats in all (one of them writes after the outage)")
    parser.add_argument("--per-chat", type=int, default=10)
    parser.add_argument("--outage-s", type=float, default=180.0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = os.getloadavg()
    started = time.monotonic()
    results = {}
    with tempfile.TemporaryDirectory(prefix="baton-drain-") as tmp:
        for backend in args.backends.split(","):
            print(f"{backend}: {args.chats * args.per_chat} answers in {args.chats} chats, "
                  f"receiver down {args.outage_s:.0f} s ...", flush=True)
            row = results[backend] = measure(backend, args, Path(tmp))
            print(f"  drain {row['drain_s']:.2f} s after the first success (target < {TARGET_S:.0f} s); "
                  f"the schedule's next retry was {row['schedule_next_retry_s']:.0f} s away; "
                  f"baseline (receiver up) {row['baseline_s']:.2f} s, drain/baseline {row['drain_to_baseline']}; "
                  f"all once, in order: {row['all_once_in_order']}", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({**run_header(load_before, postgresql="postgresql" in results),
                                       "run_seconds": round(time.monotonic() - started, 1),
                                       "options": {k: str(v) for k, v in vars(args).items()},
                                       "backends": results}, indent=2) + "\n")
    return 0 if all(r["target_met"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
