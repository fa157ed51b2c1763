"""``pip install .`` into a fresh virtualenv (the versions of requirements.lock, then Baton itself):
the installed ``baton`` command serves, runs workers, creates tenants and upgrades the database, and
its client commands deploy, start, read and complete against that server, on SQLite and PostgreSQL.
Every command runs outside the checkout, so only what was installed is used; a refusal is the
server's message and a non-zero exit, never a traceback."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.harness import BPMN_DIR, ROOT, free_port

# What the package is made of (pyproject.toml's [tool.setuptools]): copied alone, so that the
# install cannot lean on anything else of the checkout.
SOURCES = ("pyproject.toml", "README.md", "app.py", "cli.py", "baton", "engine", "bpmn", "rpc", "channels",
           "console", "ai", "migrations")
NOISE = shutil.ignore_patterns("__pycache__", "*.pyc", "instance")


@pytest.fixture(scope="session")
def baton_command(tmp_path_factory) -> Path:
    """A virtualenv with the lock's versions and Baton installed from a copy of its sources."""
    root = tmp_path_factory.mktemp("package")
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, source / name, **({"ignore": NOISE} if (ROOT / name).is_dir() else {}))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--require-hashes", "-r", str(ROOT / "requirements.lock")], check=True, timeout=900)
    subprocess.run([*pip, "--no-deps", str(source)], check=True, timeout=300)
    return venv / "bin" / "baton"


class Installed:
    """The installed command, run in a working directory outside the checkout."""

    def __init__(self, command: Path, workdir: Path, env: dict[str, str]):
        self.command, self.workdir, self.env = command, workdir, env

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.command), *args], cwd=self.workdir, env={**self.env, **env},
                              capture_output=True, text=True, timeout=120)

    def ok(self, *args: str, **env: str) -> str:
        result = self.run(*args, **env)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout


@pytest.fixture
def installed(baton_command, own_database, tmp_path):
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BATON_", "DATABASE_URL"))}
    env.update(DATABASE_URL=own_database, BATON_PUBLIC_URL=f"http://127.0.0.1:{port}",
               BATON_URL=f"http://127.0.0.1:{port}", BATON_SHUTDOWN_GRACE_S="2", PYTHONUNBUFFERED="1")
    return Installed(baton_command, tmp_path, env), port


def serving(installed: Installed, port: int) -> subprocess.Popen:
    with open(installed.workdir / "serve.log", "w") as log:  # the child keeps its own descriptor
        server = subprocess.Popen([str(installed.command), "serve", "--port", str(port)], cwd=installed.workdir,
                                  env=installed.env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return server
        except requests.RequestException:
            pass
        assert server.poll() is None and time.monotonic() < deadline, (installed.workdir / "serve.log").read_text()
        time.sleep(0.1)


def test_the_installed_command_serves_and_its_client_commands_work_the_server(installed):
    baton, port = installed
    assert baton.ok("--version").strip() == "baton, version 0.1.0"
    baton.ok("db", "upgrade")
    key = baton.ok("tenant", "create", "acme").strip().splitlines()[-1]
    server = serving(baton, port)
    try:
        deployed = baton.ok("deploy", str(BPMN_DIR / "wait_for_person.bpmn"), "--code", "review", BATON_API_KEY=key)
        started = baton.ok("start", "review", "--var", "amount=70", "--var", "who=Zoë", "--var", 'id="007"',
                           BATON_API_KEY=key)
        instance_id = int(started.split('"instance_id": ')[1].split(",")[0])
        task_id = wait_for_task(baton, key, instance_id)
        completed = baton.ok("complete", str(task_id), "--var", "approved=true", BATON_API_KEY=key)
        status = wait_for_status(baton, key, instance_id, "completed")
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0

    assert deployed.startswith("Deployed review version 1 (definition_id ")
    assert '"status": "completed"' in completed
    assert '"amount": 70' in status and '"who": "Zoë"' in status and '"id": "007"' in status
    assert '"approved": true' in status


def wait_for_task(baton: Installed, key: str, instance_id: int) -> int:
    deadline = time.monotonic() + 30
    while '"task_id"' not in (listed := baton.ok("tasks", "--instance", str(instance_id), BATON_API_KEY=key)):
        assert time.monotonic() < deadline, listed
        time.sleep(0.1)
    return int(listed.split('"task_id": ')[1].split(",")[0])


def wait_for_status(baton: Installed, key: str, instance_id: int, wanted: str) -> str:
    deadline = time.monotonic() + 30
    while f'"status": "{wanted}"' not in (status := baton.ok("status", str(instance_id), BATON_API_KEY=key)):
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    return status


def test_a_refused_deploy_prints_file_line_element_message_and_exits_1(installed):
    baton, port = installed
    key = baton.ok("tenant", "create", "acme").strip().splitlines()[-1]
    server = serving(baton, port)
    try:
        refused = baton.run("deploy", str(BPMN_DIR / "several_errors.bpmn"), BATON_API_KEY=key)
        broken_dmn = baton.workdir / "broken.dmn"
        broken_dmn.write_text('<definitions xmlns="https://www.omg.org/spec/DMN/20191111/MODEL/">\n'
                              '  <decision name="no id" />\n</definitions>\n')
        refused_dmn = baton.run("deploy", str(BPMN_DIR / "wait_for_person.bpmn"), "--dmn", "broken.dmn",
                                BATON_API_KEY=key)
        missing = baton.run("status", "999999", BATON_API_KEY=key)
        wrong_key = baton.run("tasks", BATON_API_KEY="bt_000000000000_" + "x" * 32)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)

    first = refused.stderr.splitlines()[0]
    assert refused.returncode == 1 and refused.stdout == ""
    assert first == (f"{BPMN_DIR / 'several_errors.bpmn'}:6 start: startEvent trigger 'fax' is unknown; use webhook, "
                     "webchat, telegram, whatsapp or viber.")
    assert len(refused.stderr.splitlines()) == 6
    assert refused_dmn.returncode == 1
    assert refused_dmn.stderr.startswith("broken.dmn:2: DMN file 1, decision 'None': a decision needs an id.")
    assert (missing.returncode, missing.stderr) == (1, "Error: Instance 999999 not found.\n")
    assert wrong_key.returncode == 1 and "Check BATON_API_KEY." in wrong_key.stderr
    for result in (refused, refused_dmn, missing, wrong_key):
        assert "Traceback" not in result.stdout + result.stderr


def test_bad_input_to_the_client_commands_says_what_is_wrong_and_never_shows_a_traceback(installed):
    baton, port = installed
    no_key = baton.run("status", "1")
    nobody = baton.run("status", "1", BATON_API_KEY="bt_x")
    not_an_id = baton.run("status", "abc", BATON_API_KEY="bt_x")
    no_file = baton.run("deploy", "missing.bpmn", BATON_API_KEY="bt_x")
    bad_var = baton.run("start", "x", "--var", "novalue", BATON_API_KEY="bt_x")

    assert no_key.returncode == 1 and "BATON_API_KEY is not set" in no_key.stderr
    assert nobody.returncode == 1 and f"Cannot reach Baton at http://127.0.0.1:{port}" in nobody.stderr
    assert "Check BATON_URL." in nobody.stderr
    assert not_an_id.returncode == 2 and "'abc' is not a valid integer" in not_an_id.stderr
    assert no_file.returncode == 1 and "Cannot read missing.bpmn" in no_file.stderr
    assert bad_var.returncode == 2 and "'novalue' is not name=value" in bad_var.stderr
    for result in (no_key, nobody, not_an_id, no_file, bad_var):
        assert "Traceback" not in result.stdout + result.stderr


def test_the_installed_worker_command_runs_and_stops_on_sigterm(installed):
    baton, _ = installed
    baton.ok("db", "upgrade")
    with open(baton.workdir / "worker.log", "w") as log:
        worker = subprocess.Popen([str(baton.command), "worker", "--threads", "1"], cwd=baton.workdir,
                                  env=baton.env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "Baton worker running" not in (baton.workdir / "worker.log").read_text():
        assert worker.poll() is None and time.monotonic() < deadline, (baton.workdir / "worker.log").read_text()
        time.sleep(0.1)
    worker.send_signal(signal.SIGTERM)

    assert worker.wait(30) == 0
    assert baton.ok("retention", "--days", "1").startswith("Removed what ended before ")


def test_an_installed_baton_keeps_the_embedded_database_in_the_directory_it_starts_from(baton_command, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BATON_", "DATABASE_URL"))}
    here = Installed(baton_command, tmp_path, env)

    key = here.ok("tenant", "create", "acme").strip().splitlines()[-1]
    served_from = subprocess.run([str(baton_command.parent / "python"), "-c", "import app; print(app.__file__)"],
                                 cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout

    assert key.startswith("bt_") and (tmp_path / "instance" / "baton.db").is_file()
    assert "site-packages" in served_from
