"""Chat answer latency: a customer message in -> its answer out, by several paths in one run.

Each path (bench/chat_paths.py: ``send_message`` web-chat -> send_message -> a local receiver, the
baseline; ``ai`` the same through an ai_chat step and an instant local model; ``telegram`` a Telegram
update at /webhooks/telegram -> send_message -> ``sendMessage`` at the fake Bot API) gets its own
server (`flask --app app serve` with no BATON_* setting, as `make run` starts it: SQLite, worker
processes picked by the cores; `--server-env BATON_WORKER_PROCESSES=0` for workers as threads in
the server) and fresh database, and the same steady open-loop load (--rate messages/s for --seconds,
default 10/s for 20 s); every message comes from a NEW chat, so each starts an instance that answers
once. Messages are sent on schedule by a small pool of client threads.

    latency = the arrival time of the answer for that chat - the time the inbound POST was sent

(both clocks are time.time() in this process). The report prints each path; the latency the AI
step adds over send_message (the dialog row, the turn job, its two transactions, the model round
trip); and Telegram's p50 and p99 over web-chat's (issue 12's target: within 1.2x). In the same run
a thread does GET /healthz round trips on its own keep-alive connection every --healthz-interval
seconds; the send_message path's headline is chat p50 / healthz p50 (target <= 5). A few messages
are answered first, not counted, so caches and pools are warm. Results:
bench/results/chat-latency-latest.json.

    python bench/chat_latency.py              # every path: 10 messages/s for 20 s (200 messages) each
    python bench/chat_latency.py --quick      # 10 messages/s for 5 s
    python bench/chat_latency.py --path send_message,telegram
    python bench/chat_latency.py --rate 20 --seconds 30 --server-env BATON_WORKERS=4
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from bench.chat_paths import PATHS, Inbound  # noqa: E402
from bench.common import percentile, run_header  # noqa: E402
from tests.harness import BatonServer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "chat-latency-latest.json"
TARGET_RATIO = 5.0             # chat p50 / healthz p50 on the send_message path (issue 15)
AI_TARGET = 1.5                # the AI step's p50 / send_message's (issue 15)
TELEGRAM_TARGET = 1.2          # Telegram's p50 and p99 / web-chat's (issue 12)


class Answers:
    """The answers a path received, indexed by their chat_id (read as they arrive)."""

    def __init__(self, arrivals):
        self.arrivals = arrivals
        self.seen = 0
        self.by_chat: dict[str, float] = {}
        self.texts: dict[str, str] = {}
        self.extra: list[str] = []     # a second answer for one chat_id, or an unknown body

    def collect(self) -> None:
        fresh = self.arrivals()[self.seen:]
        self.seen += len(fresh)
        for request in fresh:
            try:
                body = request.json()
                chat_id = str(body["chat_id"])
            except (ValueError, KeyError, TypeError):
                self.extra.append(request.body[:200].decode(errors="replace"))
                continue
            if chat_id in self.by_chat:
                self.extra.append(f"second answer for {chat_id}")
                continue
            self.by_chat[chat_id] = request.at
            self.texts[chat_id] = body.get("text")

    def wait_for(self, chat_ids, timeout: float) -> None:
        # Bench side only: how long the bench waits before reading, not part of any latency.
        deadline = time.monotonic() + timeout
        while True:
            self.collect()
            if all(c in self.by_chat for c in chat_ids) or time.monotonic() > deadline:
                return
            time.sleep(0.02)


class Sender:
    """POSTs inbound messages on a fixed schedule from a small thread pool, one Session per thread."""

    def __init__(self, inbound: Inbound, chat_id, threads: int):
        self.inbound = inbound
        self.chat_id = chat_id         # (prefix, number) -> the path's chat id
        self.local = threading.local()
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="chat-sender")
        self.lock = threading.Lock()
        self.sent: dict[str, float] = {}          # chat_id -> time.time() just before the POST
        self.late: list[float] = []               # actual send - scheduled send, seconds
        self.accept: list[float] = []             # POST round trip, seconds
        self.accepted_at: dict[str, float] = {}   # chat_id -> time.time() when the 202 was read
        self.errors: list[str] = []

    def _session(self) -> requests.Session:
        if not hasattr(self.local, "session"):
            self.local.session = requests.Session()
        return self.local.session

    def _send(self, chat_id: str, scheduled: float) -> None:
        body = self.inbound.body(chat_id, f"hello {chat_id}")
        session = self._session()
        sent = time.time()
        started = time.perf_counter()
        try:
            response = session.post(self.inbound.url, data=body, headers=self.inbound.headers, timeout=30)
            problem = None if response.status_code == self.inbound.accepted_status else \
                f"HTTP {response.status_code}: {response.text[:200]}"
        except requests.RequestException as exc:
            problem = repr(exc)
        elapsed = time.perf_counter() - started
        with self.lock:
            if problem is None:
                self.sent[chat_id] = sent
                self.accepted_at[chat_id] = sent + elapsed
                self.accept.append(elapsed)
                self.late.append(max(0.0, time.monotonic() - elapsed - scheduled))
            else:
                self.errors.append(f"{chat_id}: {problem}")

    def run(self, prefix: str, rate: float, seconds: float) -> list[str]:
        """Send ``rate * seconds`` messages at ``rate``/s; returns the chat_ids, in order."""
        count = max(1, round(rate * seconds))
        chat_ids = [self.chat_id(prefix, i) for i in range(count)]
        start = time.monotonic() + 0.05
        futures = []
        for i, chat_id in enumerate(chat_ids):
            scheduled = start + i / rate
            pause = scheduled - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            futures.append(self.pool.submit(self._send, chat_id, scheduled))
        for future in futures:
            future.result()
        return chat_ids

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class Healthz(threading.Thread):
    """GET /healthz round trips on one keep-alive connection, every ``interval`` s until stopped."""

    def __init__(self, url: str, interval: float):
        super().__init__(daemon=True, name="healthz")
        self.url = url
        self.interval = interval
        self.stopping = threading.Event()
        self.times: list[float] = []
        self.errors: list[str] = []

    def run(self) -> None:
        session = requests.Session()
        session.get(self.url, timeout=10)  # open the connection before timing
        while not self.stopping.wait(self.interval):
            started = time.perf_counter()
            try:
                response = session.get(self.url, timeout=10)
                elapsed = time.perf_counter() - started
                if response.status_code == 200:
                    self.times.append(elapsed)
                else:
                    self.errors.append(f"HTTP {response.status_code}")
            except requests.RequestException as exc:
                self.errors.append(repr(exc))
        session.close()


def _ms(values: list[float]) -> dict:
    if not values:
        return {}
    return {"count": len(values),
            "p50": round(percentile(values, 50) * 1000, 2),
            "p90": round(percentile(values, 90) * 1000, 2),
            "p99": round(percentile(values, 99) * 1000, 2),
            "mean": round(statistics.fmean(values) * 1000, 2),
            "min": round(min(values) * 1000, 2),
            "max": round(max(values) * 1000, 2)}


def measure(args, workdir: Path, name: str) -> dict:
    path = PATHS[name]()
    # BATON_WORKER_PROCESSES unset (the harness sets 0): the topology `make run` starts.
    env = {"BATON_WORKER_PROCESSES": "", **args.server_env, **path.start()}
    workdir = workdir / name
    workdir.mkdir()
    server = BatonServer(f"sqlite:///{workdir / 'bench.db'}", workdir, **env)
    try:
        server.start()
        admin = server.api(server.create_tenant(f"bench-{uuid.uuid4().hex[:8]}"))
        answers = Answers(path.arrivals)
        sender = Sender(path.connect(admin, server), path.chat_id, args.client_threads)
        try:
            # Warm-up, not counted: a few messages answered end to end.
            warm = sender.run("warm", rate=5, seconds=args.warmup / 5)
            answers.wait_for(warm, 30)
            if not all(c in answers.by_chat for c in warm):
                raise RuntimeError(f"warm-up messages were not answered: errors {sender.errors[:3]}; "
                                   f"server log: {server.output()[-2000:]}")
            for kept in (sender.sent, sender.accepted_at, sender.late, sender.accept):
                kept.clear()

            healthz = Healthz(f"{server.base_url}/healthz", args.healthz_interval)
            healthz.start()
            time.sleep(0.2)
            print(f"  [{name}] {args.rate:g} messages/s for {args.seconds:g} s, each from a new chat; "
                  f"GET /healthz every {args.healthz_interval * 1000:g} ms ...", flush=True)
            started = time.monotonic()
            chat_ids = sender.run("c", args.rate, args.seconds)
            send_span = time.monotonic() - started
            answers.wait_for([c for c in chat_ids if c in sender.sent], args.drain_timeout)
            healthz.stopping.set()
            healthz.join(15)
        finally:
            sender.close()

        latencies, after_accept, missing, wrong_text = [], [], [], []
        for chat_id in chat_ids:
            if chat_id not in sender.sent:
                continue
            if chat_id not in answers.by_chat:
                missing.append(chat_id)
                continue
            latencies.append(answers.by_chat[chat_id] - sender.sent[chat_id])
            after_accept.append(answers.by_chat[chat_id] - sender.accepted_at[chat_id])
            if not path.expected(chat_id, answers.texts[chat_id]):
                wrong_text.append(chat_id)
        chat = _ms(latencies)
        health = _ms(healthz.times)
        ratio = chat["p50"] / health["p50"] if chat and health else None
        baseline = name == "send_message"
        return {
            "path": path.description,
            "bpmn": str(path.bpmn.relative_to(ROOT)),
            "topology": "`flask --app app serve` as `make run` starts it, SQLite (worker processes by the cores)"
                        + (f", env {args.server_env}" if args.server_env else ""),
            "messages": len(chat_ids), "accepted": len(sender.sent), "answered": len(latencies),
            "missing": len(missing), "first_missing": missing[:5],
            "wrong_text": len(wrong_text), "extra_requests": answers.extra[:5],
            "http_errors": len(sender.errors), "first_errors": sender.errors[:3],
            "healthz_errors": len(healthz.errors),
            "send_rate_per_s": round(len(chat_ids) / send_span, 2) if send_span > 0 else None,
            "sender_late_ms": _ms(sender.late),
            "chat_latency_ms": chat,
            "accept_latency_ms": _ms(sender.accept),
            # The answer can arrive before the 202/200 is read: then this is negative.
            "after_accept_ms": _ms(after_accept),
            "healthz_ms": health,
            # the target is for the send_message path; the other paths report their ratio only
            "ratio": {"value": round(ratio, 2) if ratio else None,
                      "target": TARGET_RATIO if baseline else None,
                      "met": ratio is not None and ratio <= TARGET_RATIO if baseline else None},
        }
    finally:
        server.stop()
        path.stop()


def added_latency(results: dict) -> dict | None:
    """What the AI path adds over the send_message path, measured in the same run."""
    if not all(path in results and results[path]["chat_latency_ms"] for path in ("send_message", "ai")):
        return None
    base, ai = results["send_message"]["chat_latency_ms"], results["ai"]["chat_latency_ms"]
    return {key: round(ai[key] - base[key], 2) for key in ("p50", "p90", "p99")} | {
        "p50_ratio": round(ai["p50"] / base["p50"], 2) if base["p50"] else None, "target": AI_TARGET}


def telegram_ratio(results: dict) -> dict | None:
    """Telegram's latency over web-chat's (same process, same run): issue 12's target is 1.2 at p50 and p99."""
    if not all(path in results and results[path]["chat_latency_ms"] for path in ("send_message", "telegram")):
        return None
    base, telegram = results["send_message"]["chat_latency_ms"], results["telegram"]["chat_latency_ms"]
    ratios = {key: round(telegram[key] / base[key], 2) for key in ("p50", "p99") if base[key]}
    return {**ratios, "target": TELEGRAM_TARGET,
            "met": all(ratios.get(key, float("inf")) <= TELEGRAM_TARGET for key in ("p50", "p99"))}


def print_report(report: dict) -> None:
    for path, r in report["results"].items():
        print_path(path, r)
    added = report.get("ai_added_ms")
    if added:
        print(f"\n  the AI step adds over send_message: p50 +{added['p50']} ms, p90 +{added['p90']} ms, "
              f"p99 +{added['p99']} ms (p50 x{added['p50_ratio']}, target <= {AI_TARGET})")
    telegram = report.get("telegram_vs_webchat")
    if telegram:
        print(f"\n  Telegram / web-chat: p50 x{telegram['p50']}, p99 x{telegram['p99']} "
              f"(target <= {telegram['target']}: {'met' if telegram['met'] else 'NOT met'})")
    machine = report["machine"]
    print(f"\n  {machine['cores']} cores (load average {machine['load_average_before'][0]} before, "
          f"{machine['load_average_after'][0]} after), commit {report['git_commit']}, {report['date']}")


def print_path(path: str, r: dict) -> None:
    chat, health, accept = r["chat_latency_ms"], r["healthz_ms"], r["accept_latency_ms"]
    after = r["after_accept_ms"]
    print()
    print(f"== chat latency [{path}]: {r['path']}  [{r['bpmn']}]")
    print(f"   {r['topology']}")
    print(f"   {r['messages']} messages ({r['send_rate_per_s']}/s sent), {r['accepted']} accepted, "
          f"{r['answered']} answered, {r['missing']} missing, {r['http_errors']} HTTP errors")
    print(f"{'':34} {'p50':>9} {'p90':>9} {'p99':>9} {'max':>9}   n")
    for label, row in (("chat answer (in -> answer)", chat), ("  of it: inbound POST -> accepted", accept),
                       ("  of it: accepted -> answer", after), ("GET /healthz round trip", health)):
        if row:
            print(f"{label:34} {row['p50']:>6.1f} ms {row['p90']:>6.1f} ms {row['p99']:>6.1f} ms "
                  f"{row['max']:>6.1f} ms   {row['count']}")
    ratio = r["ratio"]
    if ratio["value"] is not None and ratio["target"] is not None:
        print(f"  chat p50 / healthz p50 = {ratio['value']:.2f}   (target <= {ratio['target']:g}: "
              f"{'met' if ratio['met'] else 'NOT met'})")
    elif ratio["value"] is not None:
        print(f"  chat p50 / healthz p50 = {ratio['value']:.2f}")
    late = r["sender_late_ms"]
    if late:
        print(f"  sender behind schedule: p50 {late['p50']} ms, max {late['max']} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=10.0, help="messages per second (default 10)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to send (default 20)")
    parser.add_argument("--warmup", type=int, default=5, help="messages before timing (default 5)")
    parser.add_argument("--client-threads", type=int, default=8,
                        help="sender threads, so a slow POST does not hold back the schedule (default 8)")
    parser.add_argument("--healthz-interval", type=float, default=0.05,
                        help="seconds between GET /healthz round trips (default 0.05)")
    parser.add_argument("--drain-timeout", type=float, default=60.0,
                        help="how long to wait for the last answers after sending (default 60)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 5 s instead of 20")
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment for the server (repeatable); none by default")
    parser.add_argument("--path", default=",".join(PATHS),
                        help=f"comma-separated paths of {', '.join(PATHS)} (default all, in one run)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 5.0)
    if args.rate <= 0 or args.seconds <= 0:
        parser.error("--rate and --seconds must be positive")
    args.server_env = dict(item.split("=", 1) for item in args.server_env)
    paths = tuple(name.strip() for name in args.path.split(",") if name.strip())
    if not paths or set(paths) - set(PATHS):
        parser.error(f"--path takes {', '.join(PATHS)}")

    load_before = os.getloadavg()
    if load_before[0] > (os.cpu_count() or 1) * 0.5:
        print(f"note: the machine is already busy (load average {load_before[0]:.1f} on "
              f"{os.cpu_count()} cores); latencies will be high and noisy", flush=True)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="baton-bench-chat-"))
    try:
        results = {path: measure(args, workdir, path) for path in paths}
    except Exception:
        for log_file in sorted(workdir.glob("*.log")):
            print(f"--- {log_file.name}\n{log_file.read_text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        **run_header(load_before),
        "options": {"rate": args.rate, "seconds": args.seconds, "warmup": args.warmup, "paths": list(paths),
                    "client_threads": args.client_threads, "healthz_interval": args.healthz_interval,
                    "quick": args.quick, "server_env": args.server_env},
        "run_seconds": round(time.monotonic() - started, 1),
        "results": results,
        "ai_added_ms": added_latency(results),
        "telegram_vs_webchat": telegram_ratio(results),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print_report(report)
    print(f"  run took {report['run_seconds']} s; written to {args.output}")
    failed = any(r["missing"] or r["http_errors"] or r["wrong_text"] or r["extra_requests"]
                 for r in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
