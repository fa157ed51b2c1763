"""Where this process's Prometheus counters live, so every process of one server adds up in its
``/metrics`` (prometheus_client's multiprocess mode: one file per process and kind in a directory).

prometheus_client chooses per-process files or plain memory when it is imported, from
``PROMETHEUS_MULTIPROC_DIR``; ``prepare()`` runs before that import (``engine.telemetry.metrics``).

- Given by the operator (the variable is set and is not one Baton made): used as it is. That is
  how gunicorn's web processes and ``flask worker`` processes on one machine share one directory.
- Otherwise Baton makes ``<tmp>/baton-metrics-<uid>/<pid>`` for this server and names it in the
  environment, so the worker processes it supervises (which inherit it) count into it too. Under
  gunicorn the directory is named after gunicorn's master (the parent), so its web processes share
  it. A directory made for a process that no longer runs is removed on the next start.
- A directory Baton made, inherited by something that is not a supervised child (a server that a
  test run or a script started after building an app itself), is not joined: the new server makes
  its own. ``MARK`` tells the two apart: a supervisor hands its children the directory with the
  mark removed (``for_children``).
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
MARK = "BATON_METRICS_DIR_MADE"   # = the directory, when Baton made it (not the operator)


def prepare(environ=os.environ) -> Path:
    """Decide this process's directory and name it in ``environ``; returns it."""
    given = environ.get(VARIABLE)
    if given and environ.get(MARK) != given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        return path
    root = Path(tempfile.gettempdir()) / f"baton-metrics-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    _remove_dead(root)
    owner = os.getppid() if environ.get("SERVER_SOFTWARE", "").startswith("gunicorn") else os.getpid()
    path = root / str(owner)
    if owner == os.getpid():
        shutil.rmtree(path, ignore_errors=True)  # a pid used again: the old files are not ours
        atexit.register(shutil.rmtree, path, True)
    path.mkdir(exist_ok=True)
    environ[VARIABLE] = environ[MARK] = str(path)
    return path


def for_children(environ: dict[str, str]) -> dict[str, str]:
    """The environment for supervised children: they count into this server's directory."""
    return {name: value for name, value in environ.items() if name != MARK}


def _remove_dead(root: Path) -> None:
    for entry in root.iterdir():
        if entry.name.isdigit() and not _alive(int(entry.name)):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
