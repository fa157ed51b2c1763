"""The server's CPU per webhook start over HTTP, against waitress answering the same requests bare.

    python bench/http_accept.py                  # 4000 requests, 16 keep-alive clients, 3 alternated rounds
    python bench/http_accept.py --count 2000 --rounds 5

Two servers answer the same POSTs (``{"amount": 60}`` to a webhook URL), one after the other in
each round, from ``--concurrency`` threads with one keep-alive ``http.client`` connection each:

- ``waitress``: waitress with the same thread count as ``flask serve``, serving a WSGI callable
  that reads the body and answers ``202 {}`` (``bare_app`` below): what any Python WSGI service
  on waitress pays per request;
- ``baton``: ``flask --app app serve`` on waitress in one process (``BATON_WORKER_PROCESSES=0``),
  accepting webhook starts of ``tests/bpmn/webhook_order.bpmn`` on SQLite, with no engine
  (``BATON_WORKERS=0``): the HTTP door, the request layer and the accept's unit of work, nothing else;
- ``granian``: the same app in one serving process of the default ``serve``
  (``BATON_SERVE_PROCESSES=1``, ``BATON_WORKERS=0``), its 8 threads fed by granian.

It prints each server's CPU per request (from ``/proc``, the server and its serving process), its
ratio to waitress's, and requests per second. The accept's own thread CPU is ``cpu_path.py``'s accept; what is left over is
what serving costs around it. Results: ``bench/results/http-accept-latest.json``.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import run_header  # noqa: E402
from bench.throughput import tree_cpu_seconds  # noqa: E402
from tests.harness import BatonServer, bpmn, free_port  # noqa: E402

BODY = b'{"amount": 60}'
HTTP_THREADS = 8  # flask serve's default (cli.py)


def bare_app(environ, start_response):
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("202 Accepted", [("Content-Type", "application/json"), ("Content-Length", "2")])
    return [b"{}"]


def post_all(port: int, path: str, count: int, clients: int) -> float:
    """``count`` POSTs from ``clients`` keep-alive connections; the seconds it took."""
    per_client = count // clients
    failures: list[str] = []

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(per_client):
            connection.request("POST", path, body=BODY, headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            if answer.status != 202:
                failures.append(str(answer.status))
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed: {failures[:3]}")
    return time.perf_counter() - started


def measure(pid: int, port: int, path: str, count: int, clients: int) -> dict:
    post_all(port, path, max(clients, count // 10), clients)  # warm: connections, caches, pools
    before = tree_cpu_seconds([pid])
    seconds = post_all(port, path, count, clients)
    done = count // clients * clients
    return {"cpu_ms_per_request": (tree_cpu_seconds([pid]) - before) / done * 1000, "requests_per_s": done / seconds}


def waitress_round(count: int, clients: int) -> dict:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c",
                               "import logging, sys; sys.path.insert(0, %r); logging.disable(logging.WARNING); "
                               "from bench.http_accept import bare_app; from waitress import serve; "
                               "serve(bare_app, host='127.0.0.1', port=%d, threads=%d, _quiet=True)"
                               % (str(ROOT), port, HTTP_THREADS)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
                break
            except OSError:
                time.sleep(0.05)
        return measure(server.pid, port, "/webhooks/inbound/x", count, clients)
    finally:
        server.kill()
        server.wait()


def baton_round(count: int, clients: int, serving_processes: bool = False) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="baton-http-accept-"))
    topology = dict(BATON_WORKER_PROCESSES="", BATON_SERVE_PROCESSES="1") if serving_processes \
        else dict(BATON_WORKER_PROCESSES="0")
    server = BatonServer(f"sqlite:///{workdir / 'bench.db'}", workdir, BATON_WORKERS="0", **topology).start()
    try:
        api = server.api(server.create_tenant("bench"))
        url = api.deploy(bpmn("webhook_order.bpmn"), code="order")["webhooks"][0]["url"]
        return measure(server.process.pid, server.port, urlsplit(url).path, count, clients)
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    load_before = os.getloadavg()
    rounds = []
    for number in range(1, args.rounds + 1):
        bare = waitress_round(args.count, args.concurrency)
        baton = baton_round(args.count, args.concurrency)
        granian = baton_round(args.count, args.concurrency, serving_processes=True)
        rounds.append({"waitress": bare, "baton": baton, "granian": granian})
        print(f"round {number}: waitress bare {bare['cpu_ms_per_request']:.3f} ms ({bare['requests_per_s']:.0f}/s), "
              f"baton on waitress {baton['cpu_ms_per_request']:.3f} ms ({baton['requests_per_s']:.0f}/s, "
              f"{baton['cpu_ms_per_request'] / bare['cpu_ms_per_request']:.2f} x), "
              f"baton on granian {granian['cpu_ms_per_request']:.3f} ms ({granian['requests_per_s']:.0f}/s, "
              f"{granian['cpu_ms_per_request'] / bare['cpu_ms_per_request']:.2f} x)", flush=True)
    names = ("waitress", "baton", "granian")
    median = {name: statistics.median(r[name]["cpu_ms_per_request"] for r in rounds) for name in names}
    ratio = {name: statistics.median(r[name]["cpu_ms_per_request"] / r["waitress"]["cpu_ms_per_request"]
                                     for r in rounds) for name in ("baton", "granian")}
    print(f"median server CPU per request: waitress bare {median['waitress']:.3f} ms, baton on waitress "
          f"{median['baton']:.3f} ms ({ratio['baton']:.2f} x), baton on granian {median['granian']:.3f} ms "
          f"({ratio['granian']:.2f} x); {args.count} requests, {args.concurrency} clients, {args.rounds} rounds")
    results = ROOT / "bench" / "results" / "http-accept-latest.json"
    results.write_text(json.dumps({**run_header(load_before), "options": vars(args), "rounds": rounds,
                                   "median_cpu_ms_per_request": median, "median_ratio": ratio}, indent=1) + "\n")
    print(f"written to {results.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
