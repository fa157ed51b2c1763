"""What every benchmark shares: percentiles, and the machine block of its results file (date,
commit, versions, load) so that figures can be traced to the code and the conditions they came from."""
from __future__ import annotations

import datetime as dt
import math
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def process_cpu_s(pid: int) -> float:
    """A live process's CPU seconds so far (user + system, from /proc); 0.0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least q % of the values at or below it."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def git_commit() -> str:
    """HEAD's hash, with ``-dirty`` when tracked files have uncommitted changes."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def versions(postgresql: bool = False) -> dict[str, str]:
    """Versions of what the figures depend on; PostgreSQL's server version when it took part."""
    import sqlite3
    from importlib.metadata import version

    found = {"python": platform.python_version(), "SpiffWorkflow": version("SpiffWorkflow"),
             "sqlite": sqlite3.sqlite_version, "SQLAlchemy": version("SQLAlchemy"), "waitress": version("waitress")}
    if postgresql:
        try:
            import psycopg

            from tests.harness import POSTGRES_ADMIN_DSN
            with psycopg.connect(POSTGRES_ADMIN_DSN, connect_timeout=5) as conn:
                found["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]
        except Exception:  # noqa: BLE001 - the version is decoration
            pass
    return found


def run_header(load_before: tuple[float, float, float], postgresql: bool = False) -> dict:
    """The ``date``, ``git_commit`` and ``machine`` keys of a results file."""
    return {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "git_commit": git_commit(),
            "machine": {"cores": os.cpu_count(), "platform": platform.platform(), **versions(postgresql),
                        "load_average_before": [round(x, 2) for x in load_before],
                        "load_average_after": [round(x, 2) for x in os.getloadavg()]}}
