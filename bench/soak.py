"""Soak: mixed load on the PostgreSQL topology for a bounded time, with retention removing as it goes.
Does anything grow (memory, file descriptors, the database) or slow down over the run?

Topology: `flask --app app serve` with BATON_WORKERS=0 and two `flask --app app worker` processes,
one fresh PostgreSQL database; BATON_RETENTION_DAYS=0.000694 (about 60 s: fractional days are
allowed for exactly this) and BATON_RETENTION_EVERY_S=10, so that retention removes during the run.

The load, each kind from its own client threads, paced (a pause after each request):

  webhook   POST /webhooks/inbound/{id} of webhook start -> script -> XOR -> end
  chat_in   web-chat conversations (tests/bpmn/chat_reply.bpmn): a customer's first message starts
            the instance, whose answer goes to a local receiver; once it arrived, the customer's
            second message ends the instance with a second answer
  start     process.start of a process with one user task (tests/bpmn/wait_for_person.bpmn)
  task_list / task_complete
            an operator's client: task.list of open tasks, then task.complete of each
  healthz   GET /healthz (no database): the machine's own noise, to divide the others' p99 by

Every --sample-s (10 s): the resident memory (VmRSS) and open file descriptors of every Baton
process (server, workers, their script-sandbox children), the database size
(pg_database_size), the instances stored, and the p99 latency of each kind of request in that
interval. When the PostgreSQL server runs with autovacuum off (this machine's does), the bench
runs `VACUUM (ANALYZE)` every --vacuum-every-s (60 s, autovacuum's default naptime) in its place. The first --warmup-s (default 90 s: retention's 60 s plus a run) are load but not
measured: the database fills up to the level retention holds it at. Then the run's first and last
quarters are compared (target: within 20 %). Results in bench/results/soak-latest.json.

    python bench/soak.py                  # 10 minutes measured
    python bench/soak.py --minutes 5
"""
from __future__ import annotations

import argparse
import http.server
import json
import os
import statistics
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

from bench.common import percentile, run_header  # noqa: E402
from bench.throughput import _start_workers, _stop  # noqa: E402
from tests.harness import BatonServer, bpmn, create_postgres_database, drop_postgres_database  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "soak-latest.json"
KINDS = ("webhook", "chat_in", "start", "task_list", "task_complete", "healthz")
LOAD_KINDS = KINDS[:-1]  # healthz: the machine's noise, measured alongside (GET /healthz touches no database)
RETENTION_DAYS = "0.000694"  # ~60 s
TARGET = 0.20


class ChatReceiver:
    """The channel's webhook: counts the answers per chat, and wakes whoever waits for one."""

    def __init__(self):
        self.answers: dict[str, int] = {}
        self.cond = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                chat_id = json.loads(body).get("chat_id")
                with receiver.cond:
                    receiver.answers[chat_id] = receiver.answers.get(chat_id, 0) + 1
                    receiver.cond.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/chat"

    def wait_for(self, chat_id: str, count: int, timeout: float) -> bool:
        with self.cond:
            ok = self.cond.wait_for(lambda: self.answers.get(chat_id, 0) >= count, timeout)
            if ok and count >= 2:  # the chat is over: forget it (the receiver must not grow either)
                del self.answers[chat_id]
            return ok

    def stop(self) -> None:
        self.server.shutdown()


class Latencies:
    """(time, seconds) of every answered request, per kind; errors counted per kind."""

    def __init__(self):
        self.lock = threading.Lock()
        self.samples: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
        self.errors: dict[str, int] = {kind: 0 for kind in KINDS}
        self.first_errors: list[str] = []

    def timed(self, kind: str, call):
        began = time.monotonic()
        try:
            response = call()
            ok = response.status_code in (200, 202) and "error" not in (response.json() or {})
        except (requests.RequestException, ValueError) as exc:
            response, ok = exc, False
        seconds = time.monotonic() - began
        with self.lock:
            if ok:
                self.samples[kind].append((began, seconds))
            else:
                self.errors[kind] += 1
                if len(self.first_errors) < 5:
                    self.first_errors.append(f"{kind}: {str(getattr(response, 'text', response))[:200]}")
        return response if ok else None

    def p99_between(self, kind: str, begin: float, end: float) -> float | None:
        with self.lock:
            values = [s for t, s in self.samples[kind] if begin <= t < end]
        return round(percentile(values, 99) * 1000, 1) if values else None


class Vacuum:
    """What autovacuum would do (its default naptime is a minute): this machine's PostgreSQL runs
    with ``autovacuum = off`` (a test server's setting), and without it no deleted or updated row's
    space is ever reused, retention or not. Runs only when the server's autovacuum is off."""

    def __init__(self, database_url: str, every_s: float):
        self.engine = create_engine(database_url, isolation_level="AUTOCOMMIT")
        self.every_s = every_s
        self.runs: list[float] = []
        self.stop = threading.Event()
        with self.engine.connect() as conn:
            self.needed = conn.execute(text("SHOW autovacuum")).scalar() == "off"
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            began = time.monotonic()
            with self.engine.connect() as conn:
                conn.execute(text("VACUUM (ANALYZE)"))
            self.runs.append(round(time.monotonic() - began, 2))

    def start(self) -> "Vacuum":
        if self.needed and self.every_s > 0:
            self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(120)
        self.engine.dispose()


class Load:
    def __init__(self, server: BatonServer, key: str, chat_key: str, webhook_url: str, config_id: int,
                 receiver: ChatReceiver, args):
        self.base, self.key, self.chat_key = server.base_url, key, chat_key
        self.webhook_url, self.config_id, self.receiver, self.args = webhook_url, config_id, receiver, args
        self.lat = Latencies()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def _rpc(self, http, method: str, **params):
        return http.post(f"{self.base}/v1/rpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                         headers={"X-API-Key": self.key}, timeout=60)

    def _webhooks(self):
        http = requests.Session()
        while not self.stop.wait(self.args.pause_s):
            self.lat.timed("webhook", lambda: http.post(self.webhook_url, json={"amount": 60}, timeout=60))

    def _chats(self):
        http = requests.Session()
        url = f"{self.base}/channels/webchat/{self.config_id}/inbound"
        headers = {"X-API-Key": self.chat_key}
        while not self.stop.wait(self.args.pause_s):
            chat_id = f"c-{uuid.uuid4().hex[:12]}"
            for text_, answers in (("hi", 1), ("bye", 2)):
                if self.lat.timed("chat_in", lambda: http.post(url, json={"chat_id": chat_id, "text": text_},
                                                               headers=headers, timeout=60)) is None:
                    break
                if not self.receiver.wait_for(chat_id, answers, 60):
                    with self.lat.lock:
                        self.lat.errors["chat_in"] += 1
                    break

    def _health(self):
        http = requests.Session()
        while not self.stop.wait(self.args.pause_s):
            self.lat.timed("healthz", lambda: http.get(f"{self.base}/healthz", timeout=60))

    def _starts(self):
        http = requests.Session()
        while not self.stop.wait(self.args.pause_s * 2):
            self.lat.timed("start", lambda: self._rpc(http, "process.start", definition_id="person"))

    def _operator(self):
        http = requests.Session()
        while not self.stop.wait(self.args.pause_s):
            listed = self.lat.timed("task_list", lambda: self._rpc(http, "task.list", status="in_progress",
                                                                   per_page=20))
            for task in (listed.json()["result"]["items"] if listed is not None else []):
                if self.stop.is_set():
                    return
                self.lat.timed("task_complete", lambda t=task: self._rpc(http, "task.complete",
                                                                         task_id=t["task_id"], result={}))

    def start(self) -> None:
        targets = ([self._webhooks] * self.args.webhook_clients + [self._chats] * self.args.chat_clients
                   + [self._starts, self._operator, self._health])
        for target in targets:
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self.threads.append(thread)

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(90)


def process_tree(pids: list[int]) -> dict[int, int]:
    """Every live descendant of ``pids`` (and themselves): pid -> the root pid it belongs to."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found: dict[int, int] = {}
    for root in pids:
        todo = [root]
        while todo:
            pid = todo.pop()
            if pid not in found:
                found[pid] = root
                todo.extend(children.get(pid, ()))
    return found


def rss_and_fds(pid: int) -> tuple[int, int] | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        return rss_kb * 1024, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration, ValueError):
        return None


def sample(roots: dict[str, int], engine) -> dict:
    """Memory and descriptors per role (a role's process and its children), database figures."""
    tree = process_tree(list(roots.values()))
    by_root = {pid: name for name, pid in roots.items()}
    rss: dict[str, int] = {name: 0 for name in roots}
    fds: dict[str, int] = {name: 0 for name in roots}
    processes: dict[str, int] = {name: 0 for name in roots}
    for pid, root in tree.items():
        found = rss_and_fds(pid)
        if found is not None:
            name = by_root[root]
            rss[name] += found[0]
            fds[name] += found[1]
            processes[name] += 1
    with engine.connect() as conn:
        size = conn.execute(text("SELECT pg_database_size(current_database())")).scalar()
        instances = conn.execute(text("SELECT count(*) FROM instances")).scalar()
        running = conn.execute(text("SELECT count(*) FROM instances WHERE status = 'running'")).scalar()
        last_id = conn.execute(text("SELECT coalesce(max(id), 0) FROM instances")).scalar()
    return {"rss_mb": {k: round(v / 2**20, 1) for k, v in rss.items()}, "fds": fds, "processes": processes,
            "db_mb": round(size / 2**20, 2), "instances_stored": instances, "running": running,
            "instances_started": last_id}


def quarter_means(rows: list[dict], key) -> tuple[float, float] | None:
    quarter = max(1, len(rows) // 4)
    first = [key(r) for r in rows[:quarter] if key(r) is not None]
    last = [key(r) for r in rows[-quarter:] if key(r) is not None]
    if not first or not last:
        return None
    return statistics.fmean(first), statistics.fmean(last)


def run(args) -> dict:
    database_url = create_postgres_database()
    workdir = Path(tempfile.mkdtemp(prefix="baton-soak-"))
    receiver = ChatReceiver()
    server = BatonServer(database_url, workdir, BATON_WORKERS="0", BATON_RETENTION_DAYS=RETENTION_DAYS,
                         BATON_RETENTION_EVERY_S=str(args.retention_every_s))
    engine = create_engine(database_url)
    workers: list = []
    load = None
    try:
        server.start()
        api = server.api(server.create_tenant("soak"))
        webhook_url = api.deploy(bpmn("webhook_order.bpmn"), code="order")["webhooks"][0]["url"]
        api.deploy(bpmn("wait_for_person.bpmn"), code="person")
        channel = api.call("channel.create", type="webchat", name="soak-site", webhook_url=receiver.url)
        api.deploy(bpmn("chat_reply.bpmn").replace("__CHANNEL__", "soak-site"), code="chat")
        chat_key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
        workers = _start_workers(server, 2, workdir)
        roots = {"server": server.process.pid, "worker-1": workers[0].pid, "worker-2": workers[1].pid}

        load = Load(server, api.key, chat_key, webhook_url, channel["config_id"], receiver, args)
        load.start()
        vacuum = Vacuum(database_url, args.vacuum_every_s).start()
        print(f"warming up {args.warmup_s:.0f} s (retention fills the database to its level) ...", flush=True)
        time.sleep(args.warmup_s)
        rows: list[dict] = []
        began = time.monotonic()
        end = began + args.minutes * 60
        print(f"{'t s':>5} {'RSS MB srv/w1/w2':>18} {'fds':>9} {'DB MB':>7} {'stored':>7} {'started':>8}   "
              + " ".join(f"{k:>13}" for k in KINDS) + "   (p99 ms)", flush=True)
        previous = began
        while time.monotonic() < end:
            time.sleep(max(0.0, min(args.sample_s, end - time.monotonic())))
            now = time.monotonic()
            row = {"t": round(now - began, 1), **sample(roots, engine),
                   "p99_ms": {kind: load.lat.p99_between(kind, previous, now) for kind in KINDS}}
            previous = now
            rows.append(row)
            rss, fds = row["rss_mb"], row["fds"]
            print(f"{row['t']:>5.0f} {rss['server']:>6}/{rss['worker-1']:>5}/{rss['worker-2']:>5} "
                  f"{sum(fds.values()):>9} {row['db_mb']:>7} {row['instances_stored']:>7} "
                  f"{row['instances_started']:>8}   "
                  + " ".join(f"{row['p99_ms'][k] if row['p99_ms'][k] is not None else '-':>13}" for k in KINDS),
                  flush=True)
        load.finish()
        vacuum.finish()
        measures = {"rss_mb_" + name: (lambda r, n=name: r["rss_mb"][n]) for name in roots}
        measures.update({"fds_total": lambda r: sum(r["fds"].values()), "db_mb": lambda r: r["db_mb"],
                         "instances_stored": lambda r: r["instances_stored"]})
        measures.update({f"p99_ms_{kind}": (lambda r, k=kind: r["p99_ms"][k]) for kind in KINDS})
        # Each kind's p99 over /healthz's in the same window: what is left once the machine's load
        # (other processes on the shared cores) is divided out.
        measures.update({f"p99_over_healthz_{kind}": (lambda r, k=kind: r["p99_ms"][k] / r["p99_ms"]["healthz"]
                                                      if r["p99_ms"][k] and r["p99_ms"]["healthz"] else None)
                         for kind in LOAD_KINDS})
        comparison = {}
        for name, key in measures.items():
            means = quarter_means(rows, key)
            if means is not None:
                first, last = means
                ratio = last / first if first else None
                comparison[name] = {"first_quarter": round(first, 2), "last_quarter": round(last, 2),
                                    "ratio": round(ratio, 3) if ratio is not None else None,
                                    "within_20_percent": ratio is not None and abs(ratio - 1) <= TARGET}
        answered = {kind: len(load.lat.samples[kind]) for kind in KINDS}
        return {"topology": "server BATON_WORKERS=0 + 2 `flask worker` processes, PostgreSQL",
                "retention_days": float(RETENTION_DAYS), "retention_every_s": args.retention_every_s,
                "warmup_s": args.warmup_s, "minutes": args.minutes, "sample_s": args.sample_s,
                "requests": answered, "errors": load.lat.errors, "first_errors": load.lat.first_errors,
                "instances_started": rows[-1]["instances_started"] if rows else 0,
                "vacuum": ({"by": "this bench (the server's autovacuum is off)", "every_s": args.vacuum_every_s,
                            "seconds_each": vacuum.runs} if vacuum.needed and args.vacuum_every_s > 0
                           else {"by": "autovacuum" if not vacuum.needed else "nobody"}),
                "comparison": comparison, "samples": rows}
    finally:
        if load is not None:
            load.finish()
        _stop(workers)
        server.stop()
        receiver.stop()
        engine.dispose()
        drop_postgres_database(database_url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="measured time (after the warm-up)")
    parser.add_argument("--warmup-s", type=float, default=90.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--pause-s", type=float, default=0.05, help="each client's pause after a request")
    parser.add_argument("--webhook-clients", type=int, default=2)
    parser.add_argument("--chat-clients", type=int, default=2)
    parser.add_argument("--retention-every-s", type=float, default=10.0)
    parser.add_argument("--vacuum-every-s", type=float, default=60.0,
                        help="VACUUM this often when the server's autovacuum is off (0: never)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    result = run(args)
    report = {**run_header(load_before, postgresql=True),
              "command": "python bench/soak.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              **result}
    print()
    print(f"requests answered: {result['requests']}; errors: {result['errors']}")
    print(f"{'measure':24} {'first quarter':>14} {'last quarter':>13} {'ratio':>7}  within 20 %")
    for name, c in result["comparison"].items():
        print(f"{name:24} {c['first_quarter']:>14} {c['last_quarter']:>13} {c['ratio']!s:>7}  "
              f"{'yes' if c['within_20_percent'] else 'NO'}")
    print(f"load average before {report['machine']['load_average_before']}, "
          f"after {report['machine']['load_average_after']}")
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
