"""Which directory a process counts its metrics in (``engine.telemetry.metrics_dir``)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from engine.telemetry import metrics_dir
from engine.telemetry.metrics_dir import MARK, VARIABLE


@pytest.fixture
def temp_root(tmp_path, monkeypatch):
    """Baton's own directories go under this test's temporary directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"baton-metrics-{os.getuid()}"


def test_an_operators_directory_is_used_as_it_is(tmp_path, temp_root):
    given = tmp_path / "shared"
    environ = {VARIABLE: str(given)}
    assert metrics_dir.prepare(environ) == given
    assert given.is_dir() and environ == {VARIABLE: str(given)}  # nothing added: it is the operator's
    assert not temp_root.exists()


def test_without_one_a_server_makes_its_own_and_names_it(temp_root):
    environ: dict[str, str] = {}
    path = metrics_dir.prepare(environ)
    assert path == temp_root / str(os.getpid()) and path.is_dir()
    assert environ[VARIABLE] == environ[MARK] == str(path)


def test_an_inherited_directory_baton_made_is_not_joined(tmp_path, temp_root):
    """A server started by a process that built an app itself (a test run) counts on its own."""
    theirs = tmp_path / "someone-elses"
    environ = {VARIABLE: str(theirs), MARK: str(theirs)}
    assert metrics_dir.prepare(environ) == temp_root / str(os.getpid())


def test_supervised_children_join_their_servers_directory(temp_root):
    server_env: dict[str, str] = {}
    server_dir = metrics_dir.prepare(server_env)
    child_env = metrics_dir.for_children(server_env)
    assert MARK not in child_env
    assert metrics_dir.prepare(child_env) == server_dir


def test_gunicorn_processes_share_their_masters_directory(temp_root):
    environ = {"SERVER_SOFTWARE": "gunicorn/23.0.0"}
    assert metrics_dir.prepare(environ) == temp_root / str(os.getppid())


def test_directories_of_processes_that_ended_are_removed(temp_root):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, check=True)
    dead = temp_root / ended.stdout.strip()
    (dead).mkdir(parents=True)
    (dead / "counter_1.db").write_bytes(b"x")
    alive = temp_root / str(os.getppid())
    alive.mkdir()
    metrics_dir.prepare({})
    assert not dead.exists()
    assert alive.exists()


def test_a_directory_left_under_this_pid_starts_empty(temp_root):
    """A pid used again: the files of the process that had it are not this one's counts."""
    stale = temp_root / str(os.getpid())
    stale.mkdir(parents=True)
    (stale / "counter_99.db").write_bytes(b"old")
    assert list(metrics_dir.prepare({}).iterdir()) == []
