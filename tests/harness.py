"""Real parts for integration tests: a Baton server in a subprocess, real databases, an RPC client."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import requests

ROOT = Path(__file__).resolve().parents[1]
BPMN_DIR = Path(__file__).resolve().parent / "bpmn"
POSTGRES_ADMIN_DSN = os.environ.get("BATON_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def create_postgres_database() -> str:
    """A new empty database; returns its SQLAlchemy URL. Raises when PostgreSQL is unreachable."""
    import psycopg

    name = f"baton_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def drop_postgres_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def queue_gauges(base_url: str) -> dict[str, float]:
    """The ``baton_jobs_*`` gauges of a server's ``/metrics``."""
    text = requests.get(base_url + "/metrics", timeout=10).text
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("baton_jobs_") and len(line.split()) == 2}


def wait_until_idle(base_url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        gauges = queue_gauges(base_url)
        if gauges.get("baton_jobs_due") == 0 and gauges.get("baton_jobs_running") == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the job queue is still busy after {timeout}s: {gauges}")
        time.sleep(0.05)


def eventually(condition, timeout: float, what: str, every_s: float = 0.1):
    """``condition()``'s first true value within ``timeout`` seconds, asked every ``every_s``;
    AssertionError naming ``what`` when it never comes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie, exited but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def child_processes(parent_pid: int, marker: bytes) -> list[int]:
    """The running children of ``parent_pid`` whose command line holds ``marker`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if int(fields[1]) == parent_pid and fields[0] != "Z" and marker in cmdline:
            found.append(int(stat.parent.name))
    return sorted(found)


def bpmn(name: str) -> str:
    return (BPMN_DIR / name).read_text(encoding="utf-8")


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]):
        self.code = error.get("code")
        self.message = error.get("message")
        self.data = error.get("data") or {}
        self.reason = self.data.get("reason")
        super().__init__(f"{self.code} {self.reason}: {self.message}")


class Api:
    """A JSON-RPC client for one API key."""

    def __init__(self, base_url: str, key: str | None, path: str = "/v1/rpc"):
        self.base_url = base_url
        self.key = key
        self.path = path
        self.http = requests.Session()
        self._id = 0

    def post(self, body: Any = None, *, data: bytes | str | None = None, headers: dict | None = None):
        all_headers = {"Content-Type": "application/json"}
        if self.key is not None:
            all_headers["X-API-Key"] = self.key
        all_headers.update(headers or {})
        if data is None:
            return self.http.post(self.base_url + self.path, json=body, headers=all_headers, timeout=30)
        return self.http.post(self.base_url + self.path, data=data, headers=all_headers, timeout=30)

    def call(self, method: str, /, **params: Any) -> Any:  # (positional: audit.list has a param "method")
        self._id += 1
        response = self.post({"jsonrpc": "2.0", "method": method, "params": params, "id": self._id})
        body = response.json()
        if "error" in body:
            raise RpcError(body["error"])
        assert response.status_code == 200, response.text
        return body["result"]

    def deploy(self, xml: str, code: str | None = None, dmn: list[str] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"bpmn": xml}
        if code is not None:
            params["code"] = code
        if dmn is not None:
            params["dmn"] = dmn
        return self.call("definition.deploy", **params)

    def wait_until_idle(self, timeout: float = 30.0) -> None:
        """Until the server's job queue has nothing due and nothing running (``baton_jobs_due`` and
        ``baton_jobs_running`` both 0): what a "nothing more happened" assertion waits for, instead
        of a sleep that passes for the wrong reason on a slow machine."""
        wait_until_idle(self.base_url, timeout)

    def wait_for(self, instance_id: int, statuses=("completed", "failed", "cancelled"),
                 timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = self.call("process.status", instance_id=instance_id)
            if status["status"] in statuses:
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"instance {instance_id} still {status['status']} after {timeout}s: {status}")
            time.sleep(0.02)


class _BatonProcess:
    """A ``flask --app app ...`` child process: started until ready, stopped or killed with ``kill -9``."""

    kind = "process"
    APP = "app"

    def __init__(self, database_url: str, workdir: Path, log_path: Path, env: dict[str, str]):
        self.database_url = database_url
        self.workdir = workdir
        self.log_path = log_path
        self.env = env
        self.process: subprocess.Popen | None = None

    def _flask_args(self) -> list[str]:
        raise NotImplementedError

    def _is_ready(self, log_offset: int) -> bool:
        raise NotImplementedError

    def start(self, timeout: float = 60.0):
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "a") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen([sys.executable, "-m", "flask", "--app", self.APP, *self._flask_args()],
                                            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.kind} exited: {self.output()[-3000:]}")
            if self._is_ready(offset):
                return self
            time.sleep(0.1)
        raise RuntimeError(f"{self.kind} did not become ready: {self.output()[-3000:]}")

    def kill(self) -> None:
        """``kill -9``: no clean-up of any kind."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


class BatonServer(_BatonProcess):
    """``flask --app app serve`` in a subprocess, on a free port, against ``database_url``."""

    kind = "server"

    def __init__(self, database_url: str, workdir: Path, **env: str):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        super().__init__(database_url, workdir, workdir / f"server-{self.port}.log", {
            **os.environ, "DATABASE_URL": database_url, "BATON_PUBLIC_URL": self.base_url,
            "BATON_ALLOW_PRIVATE_URLS": "1", "BATON_SCRIPT_TIMEOUT_S": "2", "BATON_HTTP_RETRY_BASE_S": "0.2",
            "BATON_SHUTDOWN_GRACE_S": "2",  # a test's stop() does not wait out the default 20 s
            # Workers as threads of the server (tests kill, restart and inspect that one process);
            # the default of a real start picks worker processes by the cores: pass "" for that.
            "BATON_WORKER_PROCESSES": "0",
            "PYTHONUNBUFFERED": "1", **env})

    def _flask_args(self) -> list[str]:
        return ["serve", "--port", str(self.port)]

    def _is_ready(self, log_offset: int) -> bool:
        try:
            return requests.get(self.base_url + "/readyz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def command(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "flask", "--app", "app", *args], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=120)

    def create_tenant(self, name: str) -> str:
        """``flask --app app tenant create NAME`` with this server's settings; its admin key.

        The command runs in this process (Flask's CLI runner, on an app built like the command's
        own): a second interpreter's start cost ~1.5 s of CPU per tenant, a sizeable share of the
        suite's. ``tests/integration/test_cli.py`` runs the command as a process of its own."""
        from app import create_app
        from engine.store.db import db

        app = create_app({**self.env, "BATON_WORKERS": "0", "BATON_WORKER_PROCESSES": "0"})
        try:
            result = app.test_cli_runner().invoke(args=["tenant", "create", name])
        finally:
            with app.app_context():
                db.engine.dispose()
        assert result.exit_code == 0, result.output
        return result.output.strip().splitlines()[-1]

    def api(self, key: str | None, path: str = "/v1/rpc") -> Api:
        return Api(self.base_url, key, path)


class BatonWorker(_BatonProcess):
    """``flask --app app worker --threads N`` in a subprocess against ``database_url`` (no HTTP)."""

    kind = "worker"
    READY_LINE = "Baton worker running"

    def __init__(self, database_url: str, workdir: Path, threads: int = 1, **env: str):
        self.threads = threads
        super().__init__(database_url, workdir, workdir / f"worker-{uuid.uuid4().hex[:8]}.log", {
            **os.environ, "DATABASE_URL": database_url, "BATON_ALLOW_PRIVATE_URLS": "1",
            "BATON_SCRIPT_TIMEOUT_S": "2", "BATON_WORKERS": str(threads), "BATON_SHUTDOWN_GRACE_S": "2",
            "PYTHONUNBUFFERED": "1", **env})

    def _flask_args(self) -> list[str]:
        return ["worker", "--threads", str(self.threads)]

    def _is_ready(self, log_offset: int) -> bool:
        with open(self.log_path, errors="replace") as log:
            log.seek(log_offset)
            return self.READY_LINE in log.read()


@contextlib.contextmanager
def server_with_model(database_url: str, workdir: Path, **env: str) -> Iterator[tuple[BatonServer, Any, Any]]:
    """A server (not started) configured for a local OpenAI-compatible model (``FakeOpenAI``) and a
    local webhook receiver (``Receiver``), both started; all stopped afterwards, and a PostgreSQL
    database dropped."""
    from tests.fake_openai import FakeOpenAI
    from tests.receiver import Receiver

    fake, receiver = FakeOpenAI().start(), Receiver().start()
    server = BatonServer(database_url, workdir, BATON_AI_BASE_URL=fake.base_url, BATON_AI_MODEL="fake-model", **env)
    try:
        yield server, fake, receiver
    finally:
        server.stop()
        receiver.stop()
        fake.stop()
        if database_url.startswith("postgresql"):
            drop_postgres_database(database_url)


def unit_of_work_of(app, owner: str = "test"):
    """A unit of work on ``app``'s database for a test that writes or reads rows itself (reused after
    each ``commit`` or ``rollback``; its session is the app context's active where first used)."""
    from engine.store.db import db
    from engine.store.unit_of_work import UnitOfWork

    with app.app_context():
        engine = db.engine
    return UnitOfWork(engine, app.extensions["baton.units"].wakers, owner=owner)


def claim_jobs(units, worker_id: str, lease_seconds: float, limit: int = 1) -> list:
    """Lease up to ``limit`` ready jobs as a worker's claim does: a unit of work of its own on the
    driver connection (one statement on PostgreSQL), committed."""
    from engine import jobs

    with units.begin("claim", on_driver=True, single_write=True) as uow:
        return jobs.claim(uow, worker_id, lease_seconds, limit=limit)


def scheduled_timer_starts(database_url: str, code: str) -> list[tuple[int, int]]:
    """``(definition_id, runs_left)`` of every ``timer_start`` job the database holds for ``code``:
    what a schedule will still start, read where it is kept (no waiting to see nothing happen)."""
    import sqlalchemy as sa

    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(sa.text("SELECT payload FROM jobs WHERE kind = 'timer_start'")).scalars().all()
    finally:
        engine.dispose()
    payloads = [row if isinstance(row, dict) else __import__("json").loads(row) for row in rows]
    return sorted((p["definition_id"], p.get("runs_left", 0)) for p in payloads if p.get("code") == code)
