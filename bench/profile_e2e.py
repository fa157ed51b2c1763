"""Where the time of an end-to-end SQLite run goes: phase timers, SQL statements, cProfile.

Runs the same load as ``throughput.py`` (b) against ``flask --app bench.profiled_app serve``
(Baton's app plus the bench-only hooks of ``bench/profiled_app.py``), then stops the server with
SIGTERM so that it writes what it measured, and prints it.

    python bench/profile_e2e.py                      # phase timers + SQL, 1000 instances
    python bench/profile_e2e.py --cprofile           # also cProfile on CPU time (slower; for "where")
    python bench/profile_e2e.py --cprofile wall      # cProfile on wall time (waits included)
    python bench/profile_e2e.py --workers 0          # the HTTP accept path alone
    python bench/profile_e2e.py --backlog            # accept all first (workers=0), then drain
"""
from __future__ import annotations

import argparse
import json
import pstats
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from bench.common import percentile  # noqa: E402
from bench.throughput import START_DATA, Load, tree_cpu_seconds, wait_until_completed  # noqa: E402
from tests.harness import BatonServer, bpmn  # noqa: E402


class ProfiledServer(BatonServer):
    """BatonServer running ``bench.profiled_app`` instead of ``app``."""

    APP = "bench.profiled_app"

    def _flask_args(self) -> list[str]:
        return [*super()._flask_args(), *self.serve_args]

    def dump_and_stop(self) -> None:
        self.process.terminate()  # profiled_app writes its results on SIGTERM, then exits
        self.process.wait(60)


def run(args, workdir: Path) -> dict:
    database_url = f"sqlite:///{workdir / 'bench.db'}"
    out = workdir / "out"
    env = {"BATON_BENCH_OUT": str(out), "BATON_BENCH_PHASES": "1",
           "BATON_BENCH_CPROFILE": args.cprofile or "0", **args.server_env}
    workers = "0" if args.backlog else str(args.workers)
    env["BATON_WORKERS"] = workers
    server = ProfiledServer(database_url, workdir, **env)
    server.serve_args = ["--threads", str(args.http_threads)] if args.http_threads else []
    server.start()
    try:
        key = server.create_tenant(f"bench-{uuid.uuid4().hex[:8]}")
        url = server.api(key).deploy(bpmn("webhook_order.bpmn"), code="bench-order")["webhooks"][0]["url"]
        if workers != "0":
            warm = [requests.post(url, json=START_DATA, timeout=30).json()["instance_id"] for _ in range(4)]
            wait_until_completed(database_url, min(warm) - 1, len(warm), 30)
            after_id = max(warm)
        else:
            after_id = 0
        load = Load(url, args.count, args.concurrency, args.max_seconds)
        started = time.time()
        cpu = tree_cpu_seconds([server.process.pid])
        load.run()
        accepted = len(load.instance_ids)
        accept_s = load.last_accepted - load.first_sent
        result = {"accepted": accepted, "accept_per_s": round(accepted / accept_s, 1),
                  "p50_ms": round(percentile(load.latencies, 50) * 1000, 1),
                  "p99_ms": round(percentile(load.latencies, 99) * 1000, 1), "errors": load.errors[:3]}
        if args.backlog:  # now the workers alone, on a full queue
            result["accept_cpu_ms_per_instance"] = round(
                1000 * (tree_cpu_seconds([server.process.pid]) - cpu) / accepted, 2)
            server.dump_and_stop()
            shutil.move(str(out), str(workdir / "out-accept"))
            server.env["BATON_WORKERS"] = str(args.workers)
            server.start()
            started = time.time()
            cpu = tree_cpu_seconds([server.process.pid])
        if workers != "0" or args.backlog:
            done = wait_until_completed(database_url, after_id, accepted, args.drain_timeout)
            begin = started if args.backlog else load.first_sent
            end = done["last_completed"] or done["observed_at"]
            result.update(completed=done["counts"].get("completed", 0), seconds=round(end - begin, 3),
                          per_s=round(done["counts"].get("completed", 0) / (end - begin), 1))
        result["cpu_ms_per_instance"] = round(1000 * (tree_cpu_seconds([server.process.pid]) - cpu) / accepted, 2)
        result["elapsed_s"] = round(time.time() - started, 3)
    finally:
        if server.process and server.process.poll() is None:
            server.dump_and_stop()
    result["phases"] = json.loads((out / "phases.json").read_text())
    result["profiles"] = {p.stem: str(p) for p in out.glob("*.prof")}
    return result


def report(result: dict, args) -> None:
    print(json.dumps({k: v for k, v in result.items() if k not in ("phases", "profiles")}, indent=1))
    phases = result["phases"]
    cpu = phases["process_cpu_s"]
    print(f"\nserver process CPU: user {cpu['user']:.1f} s, system {cpu['system']:.1f} s "
          f"(over {result['elapsed_s']} s wall after load start)")
    print(f"\n{'thread':7} {'phase':66} {'count':>7} {'wall s':>8} {'cpu s':>7} {'ms/call':>8}")
    for row in phases["phases"]:
        print(f"{row['thread']:7} {row['label'][:66]:66} {row['count']:>7} {row['wall_s']:>8.2f} "
              f"{row['cpu_s']:>7.2f} {1000 * row['wall_s'] / max(row['count'], 1):>8.2f}")
    print(f"\n{'thread':7} {'SQL (top 20 by wall time)':90} {'count':>7} {'wall s':>7} {'ms':>6}")
    for row in phases["sql"][:20]:
        print(f"{row['thread']:7} {row['statement']:90} {row['count']:>7} {row['wall_s']:>7.2f} "
              f"{1000 * row['wall_s'] / max(row['count'], 1):>6.2f}")
    for name, path in result["profiles"].items():
        print(f"\n===== cProfile {name}: top {args.top} by cumulative time")
        pstats.Stats(path).sort_stats("cumulative").print_stats(args.top)
        print(f"===== cProfile {name}: top {args.top} by own time")
        pstats.Stats(path).sort_stats("tottime").print_stats(args.top)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="BATON_WORKERS (0: accept path only)")
    parser.add_argument("--http-threads", type=int, default=None, help="waitress threads (serve --threads)")
    parser.add_argument("--backlog", action="store_true",
                        help="accept everything with no workers, then restart with workers and time the drain")
    parser.add_argument("--cprofile", nargs="?", const="cpu", choices=["cpu", "wall"], default=None,
                        help="also cProfile the server's threads, on thread CPU time (default) or wall time")
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--keep", type=Path, default=None, help="copy the .prof files and phases.json here")
    args = parser.parse_args()
    args.server_env = dict(item.split("=", 1) for item in args.server_env)
    workdir = Path(tempfile.mkdtemp(prefix="baton-profile-"))
    try:
        result = run(args, workdir)
        report(result, args)
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for path in list((workdir / "out").glob("*")) + list(workdir.glob("out-accept/*")):
                shutil.copy(path, args.keep / (("accept-" if "out-accept" in str(path) else "") + path.name))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
