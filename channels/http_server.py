"""The HTTP servers of ``flask serve``, and their own answers in Baton's JSON error shape.

**Several processes, granian (the default on two cores or more).** ``serve_processes`` runs
granian (an HTTP server written in Rust, for WSGI apps) with ``BATON_SERVE_PROCESSES`` processes
that share the listening socket; each builds the app (``app.create_serving_app``), serves HTTP from
``--threads`` Python threads and runs its own engine threads, so the job a request commits is run by
the process that accepted it, woken in memory. Processes are started with ``spawn`` (a fresh
interpreter, never a fork of a process with threads and open connections); one that dies is
started again; when the server stops (SIGTERM, Ctrl-C) each stops its workers gracefully, and when
the server is killed (``kill -9``) each is told by the kernel (``follow_parent``) and stops the
same way. Each is signalled once: it runs in a process group of its own, out of reach of a
terminal's Ctrl-C, which the server takes and passes on. Measured: the server's CPU per webhook start 0.57 ms against waitress's 0.86 ms with the
same 8 threads (bench/README.md).

**One process, waitress** (``BATON_WORKER_PROCESSES`` set, ``BATON_SERVE_PROCESSES=0``, one core).
A request waitress cannot parse (a bad request line, a control character in a header, an invalid
Content-Length, a body past its hard limit, a transfer encoding it does not implement) never
reaches Flask: waitress answers it itself, in plain text. Its channel class names the task that
writes that answer; ``JsonErrorChannel`` swaps in one that writes ``{"error": {"code": "<word>",
"message": "<sentence>"}}`` with the same status, and closes the connection as waitress does (what
follows a request it could not parse cannot be trusted). granian and gunicorn answer such requests
with their own code (an empty 400), which has no such hook: docs/operations.md says so.
"""
from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
from typing import Callable

from waitress.channel import HTTPChannel
from waitress.task import ErrorTask

from engine.telemetry import metrics_dir

PARENT = "BATON_SERVING_PARENT"  # the pid of the server whose serving process this is
_PR_SET_PDEATHSIG = 1

_WORDS = {400: "bad_request", 413: "payload_too_large", 431: "headers_too_large", 501: "not_implemented"}


class JsonErrorTask(ErrorTask):
    def execute(self):
        error = self.request.error
        code = int(getattr(error, "code", 500) or 500)
        reason = str(getattr(error, "reason", "Bad Request"))
        detail = str(getattr(error, "body", "") or "").strip()
        message = f"{reason}: {detail}." if detail else f"{reason}."
        body = json.dumps({"error": {"code": _WORDS.get(code, "internal" if code >= 500 else "bad_request"),
                                     "message": message}}).encode()
        self.status = f"{code} {reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class JsonErrorChannel(HTTPChannel):
    error_task_class = JsonErrorTask


def serve_processes(loader: Callable, *, host: str, port: int, processes: int, threads: int,
                    log_level: str) -> None:
    """Serve with granian until SIGTERM or Ctrl-C: ``processes`` processes, each the app ``loader``
    returns (a module-level function: the processes are spawned and import it) with ``threads``
    HTTP threads. Returns once every process has stopped."""
    import multiprocessing

    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels

    multiprocessing.set_start_method("spawn", force=True)
    os.environ.pop(metrics_dir.MARK, None)  # the processes count into this server's metrics directory
    # granian advises at most 2 x cores + 1 threads; Baton's default 8 leaves 4 of them free while
    # BATON_MAX_LONG_POLLS (4) long polls wait in a process.
    logging.getLogger("_granian").addFilter(_NotTheThreadsAdvice())
    os.environ[PARENT] = str(os.getpid())
    try:
        level = LogLevels(log_level.lower())
    except ValueError:
        level = LogLevels.warning
    server = Granian(f"{loader.__module__}:{loader.__name__}", address=host, port=port,
                     interface=Interfaces.WSGI, websockets=False, workers=processes, blocking_threads=threads,
                     respawn_failed_workers=True, log_level=level,
                     # granian's lines go to Baton's handler (text or JSON lines), its access log nowhere.
                     log_dictconfig={"loggers": {"_granian": {"handlers": [], "propagate": True},
                                                 "granian.access": {"handlers": [], "propagate": False,
                                                                    "level": "CRITICAL"}}})
    server.serve(target_loader=loader, wrap_loader=False)


class _NotTheThreadsAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Configuration allows spawning up to")


def follow_parent() -> None:
    """In a serving process: a process group of its own, so that Ctrl-C at a terminal (SIGINT to the
    whole foreground group) reaches only the server, which then stops each serving process once
    (granian 2.8's serving process hangs when it is signalled twice: its second ``WorkerSignal.set``
    never returns); and SIGTERM when the server that started it dies, however it died (Linux's
    parent-death signal), so that it stops gracefully instead of serving on alone."""
    parent = os.environ.get(PARENT)
    if parent is None:
        return
    os.setpgid(0, 0)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the server's own stop still stops it
        return
    if os.getppid() != int(parent):  # it died before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


def at_process_end(stop: Callable[[], None]) -> None:
    """Call ``stop`` as this serving process ends (after granian stopped serving in it)."""
    from multiprocessing import util

    util.Finalize(None, stop, exitpriority=10)
