"""Baton's app with measuring hooks, for ``flask --app bench.profiled_app serve`` (bench only).

Nothing here is imported by Baton itself. Environment flags:

* ``BATON_BENCH_OUT=<dir>``    where the results go, written when the process gets SIGTERM;
* ``BATON_BENCH_PHASES=1``     wall and thread-CPU time of each phase of the HTTP accept path and
                               of the worker path (``phases.json``), and the SQL statements run;
* ``BATON_BENCH_CPROFILE=1``   (or ``cpu``: thread CPU time instead of wall time) cProfile of each HTTP request and of each worker thread's loop
                               (``http.prof``, ``worker.prof``; cProfile slows the process ~2x,
                               so its figures are for "where", not "how fast").
"""
from __future__ import annotations

import cProfile
import functools
import json
import os
import pstats
import re
import threading
import time
from collections import defaultdict
from pathlib import Path

import app as baton_app
from channels import webhook as webhook_door
from engine import jobs, webhooks
from engine.jobs import worker
from engine.runtime import human_task_rows, runner, stepping
from engine.sandbox import Sandbox
from engine.store import workflows
from engine.store.unit_of_work import UnitOfWork

OUT = Path(os.environ.get("BATON_BENCH_OUT", "."))
PHASES = os.environ.get("BATON_BENCH_PHASES") == "1"
CPROFILE = os.environ.get("BATON_BENCH_CPROFILE", "") in ("1", "wall", "cpu")
# "cpu": time.thread_time, so that waiting (locks, GIL, sleeps, I/O) is not counted; else wall time.
_CLOCK = (time.thread_time,) if os.environ.get("BATON_BENCH_CPROFILE") == "cpu" else ()

_lock = threading.Lock()
_totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0])  # count, wall, cpu
_sql: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
_profiles: dict[str, list[cProfile.Profile]] = defaultdict(list)
_local = threading.local()


def _kind() -> str:
    name = threading.current_thread().name
    if name.startswith("baton-worker"):
        return "worker"
    if name.startswith("waitress"):
        return "http"
    return "other"


def _record(kind: str, label: str, wall: float, cpu: float) -> None:
    with _lock:
        entry = _totals[(kind, label)]
        entry[0] += 1
        entry[1] += wall
        entry[2] += cpu


def timed(owner, attr: str, label: str | None = None) -> None:
    """Replace ``owner.attr`` by a wrapper adding its wall and thread-CPU time to ``label``.

    An attribute that the code no longer has is skipped: the engine changes, the bench goes on."""
    original = getattr(owner, attr, None)
    if original is None:
        return
    label = label or f"{getattr(owner, '__name__', owner)}.{attr}"

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            _record(_kind(), label, time.perf_counter() - wall, time.thread_time() - cpu)

    setattr(owner, attr, wrapper)


_SQL_SHAPE = re.compile(r"\s+")


def _install_sql_timer(engine) -> None:
    from sqlalchemy import event

    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn, cursor, statement, parameters, context, executemany):
        conn.info.setdefault("bench_started", []).append(time.perf_counter())

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn, cursor, statement, parameters, context, executemany):
        started = conn.info["bench_started"].pop()
        shape = _SQL_SHAPE.sub(" ", statement)[:90]
        with _lock:
            entry = _sql[(_kind(), shape)]
            entry[0] += 1
            entry[1] += time.perf_counter() - started


def _install_phases() -> None:
    from sqlalchemy.orm import Session

    # HTTP accept path (the door's owner before create_app: the door binds it when it is built)
    timed(webhook_door, "accept", "webhook: accept in its unit of work (+ COMMIT)")
    timed(webhooks, "accept", "webhook: webhooks.accept (SELECT route + latest, INSERT instance + job)")
    # worker path
    timed(jobs, "claim_or_next", "worker: jobs.claim_or_next (claim; when idle, when to look again)")
    timed(worker.WorkerPool, "_sleep", "worker: sleeping (no job)")
    timed(runner.Runner, "advance", "worker: Runner.advance (total)")
    timed(stepping, "run", "worker: do_engine_steps + summarize (incl. sandbox, serialize)")
    timed(workflows.SpecCache, "get", "worker: SpecCache.get")
    timed(workflows.SpecCache, "resolve", "worker: SpecCache.resolve")
    timed(workflows, "restore_workflow", "worker: restore_workflow (deserialize)")
    timed(workflows, "new_workflow", "worker: new_workflow")
    timed(workflows, "dump_workflow", "worker: dump_workflow (serialize)")
    timed(human_task_rows, "sync", "worker: human_task_rows.sync (SELECT tasks)")
    timed(runner.Runner, "_save", "worker: Runner._save (UPDATE instance + DELETE job [+ rows])")
    timed(jobs, "release", "worker: jobs.release")
    timed(Sandbox, "execute", "sandbox: execute (script round trip)")
    timed(Sandbox, "evaluate", "sandbox: evaluate (condition)")
    # the database, whoever calls it (a unit of work on the driver commits without a Session)
    timed(UnitOfWork, "commit", "db: UnitOfWork.commit")
    timed(Session, "commit", "db: Session.commit")
    timed(Session, "rollback", "db: Session.rollback")
    timed(Session, "execute", "db: Session.execute")
    timed(Session, "flush", "db: Session.flush")


def _install_cprofile(flask_app) -> None:
    inner = flask_app.wsgi_app

    def wsgi_app(environ, start_response):
        profiler = getattr(_local, "profiler", None)
        if profiler is None:
            profiler = _local.profiler = cProfile.Profile(*_CLOCK)
            with _lock:
                _profiles["http"].append(profiler)
        profiler.enable()
        try:
            return inner(environ, start_response)
        finally:
            profiler.disable()

    flask_app.wsgi_app = wsgi_app
    loop = worker.WorkerPool._loop

    def profiled_loop(self, worker_id):
        profiler = cProfile.Profile(*_CLOCK)
        profiler.enable()
        try:
            loop(self, worker_id)
        finally:
            profiler.disable()
            with _lock:
                _profiles["worker"].append(profiler)

    worker.WorkerPool._loop = profiled_loop


def _dump(flask_app) -> None:
    baton = flask_app.extensions["baton"]
    for pool in (baton.pool, baton.call_pool):
        if pool is not None:
            pool.stop()  # worker loops return: their profilers are disabled and collected
    OUT.mkdir(parents=True, exist_ok=True)
    times = os.times()
    result = {"process_cpu_s": {"user": times.user, "system": times.system},
              "phases": [{"thread": k, "label": label, "count": int(c), "wall_s": round(w, 4),
                          "cpu_s": round(cpu, 4)} for (k, label), (c, w, cpu) in sorted(_totals.items())],
              "sql": [{"thread": k, "statement": s, "count": int(c), "wall_s": round(w, 4)}
                      for (k, s), (c, w) in sorted(_sql.items(), key=lambda i: -i[1][1])]}
    (OUT / "phases.json").write_text(json.dumps(result, indent=1))
    for kind, profilers in _profiles.items():
        if profilers:
            stats = pstats.Stats(profilers[0])
            for profiler in profilers[1:]:
                stats.add(profiler)
            stats.dump_stats(str(OUT / f"{kind}.prof"))


def create_app():
    if PHASES:
        _install_phases()
    flask_app = baton_app.create_app()
    if PHASES:
        from engine.store.db import db

        with flask_app.app_context():
            _install_sql_timer(db.engine)
    if CPROFILE:
        _install_cprofile(flask_app)

    # `serve` (cli.py) turns SIGTERM into a graceful stop that ends in Baton.stop: the results are
    # written there, before the workers stop (their loops' profilers are collected by _dump).
    baton = flask_app.extensions["baton"]
    stop = baton.stop

    def dump_then_stop(*args, **kwargs):
        try:
            _dump(flask_app)
        finally:
            stop(*args, **kwargs)

    baton.stop = dump_then_stop
    return flask_app
