"""Script tasks: Python under RestrictedPython, run in a pool of persistent, limited child processes.

RestrictedPython blocks imports, dunders and class walking but not ``while True`` or ``9**9**9``,
so each script runs in a host process (``engine/sandbox/host.py``) that limits its own memory,
CPU, files and processes; the parent enforces the wall clock by killing a host and starting a
fresh one. ``Sandbox`` is the one object the engine holds: expressions in-process, scripts here.
"""
from __future__ import annotations

import json
import math
import os
import queue
import select
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping
from typing import Any

from engine.errors import BatonError, SandboxLimitError, ScriptError
from engine.sandbox import expressions
from engine.sandbox.host import script_problem
from engine.telemetry import metrics

_HOST_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "host.py")
_START_TIMEOUT_S = 30.0


class _Timeout(Exception):
    """The host did not answer before the deadline."""


class _HostDied(Exception):
    """The host process ended (or closed its pipe) before answering."""

    def __init__(self, before_request: bool = False) -> None:
        super().__init__()
        self.before_request = before_request  # True: the script never started, retrying is safe


class _Host:
    """One persistent child process, used by one caller at a time (the pool guarantees that)."""

    def __init__(self, memory_mb: int, timeout_s: float) -> None:
        self.memory_mb = memory_mb
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen | None = None
        self.buffer = bytearray()
        self.poller: select.poll | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.kill()  # reap a dead predecessor and close its pipes
        # subprocess = fork+exec in C: safe from a threaded parent, no Python runs in between,
        # close_fds drops inherited DB sockets, exec resets signal handlers. -I ignores PYTHON*
        # variables and the user site; -B never writes .pyc files (the host's RLIMIT_FSIZE is 0);
        # the environment is empty apart from the locale.
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", _HOST_SCRIPT, str(self.memory_mb), repr(self.timeout_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={"LC_ALL": "C.UTF-8"}, cwd="/", close_fds=True, start_new_session=True, bufsize=0,
        )
        self.buffer = bytearray()
        self.poller = select.poll()  # not select(): a server's descriptors can exceed 1024
        self.poller.register(self.proc.stdout.fileno(), select.POLLIN)
        try:
            ready = self._read_line(time.monotonic() + _START_TIMEOUT_S)
        except (_HostDied, _Timeout):
            self.kill()
            raise BatonError("The script sandbox could not start its host process "
                             f"(try: {sys.executable} -I {_HOST_SCRIPT} 256 5).") from None
        if json.loads(ready) != {"ready": True}:
            self.kill()
            raise BatonError("The script sandbox host answered unexpectedly.")

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.kill()
        except OSError:
            pass
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)  # reap it: no zombies
        except subprocess.TimeoutExpired:
            pass

    def call(self, payload: bytes, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(self.proc.stdin.fileno(), view):]
        except OSError:  # BrokenPipeError: it died while idle
            raise _HostDied(before_request=True) from None
        try:
            return json.loads(self._read_line(deadline))
        except ValueError:  # a garbled reply: treat the host as broken
            raise _HostDied() from None

    def _read_line(self, deadline: float) -> bytes:
        fd = self.proc.stdout.fileno()
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[:end + 1]
                return line
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Timeout()
            if not self.poller.poll(max(1, math.ceil(remaining * 1000))):
                continue  # the deadline check above decides
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                raise _HostDied()
            self.buffer += chunk


def _kill_all(hosts: list[_Host]) -> None:
    for host in hosts:
        host.kill()


class Sandbox:
    """Evaluates expressions in-process and runs scripts in a pool of limited child processes.

    Thread-safe: each thread gets its own expression evaluator; each script host serves one
    caller at a time. Hosts start on first use and are replaced after a timeout, a memory
    failure or a crash. Call ``close()`` to stop them (also done at interpreter exit).
    """

    def __init__(self, timeout_s: float = 5.0, memory_mb: int = 256, hosts: int = 2) -> None:
        if timeout_s <= 0 or memory_mb <= 0 or hosts <= 0:
            raise ValueError("timeout_s, memory_mb and hosts must be positive")
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self._hosts = [_Host(self.memory_mb, self.timeout_s) for _ in range(hosts)]
        # LIFO: a lone caller keeps reusing the one warm host; the others start only if needed.
        self._idle: queue.LifoQueue[_Host] = queue.LifoQueue()
        for host in self._hosts:
            self._idle.put(host)
        self._closed = False
        # Runs when the sandbox is garbage-collected or at interpreter exit: no host outlives us.
        self._finalizer = weakref.finalize(self, _kill_all, self._hosts)

    # -- expressions ---------------------------------------------------------------------------

    def evaluate(self, expression: str, variables: Mapping[str, Any]) -> Any:
        """The value of one expression; names are the variables. Raises ScriptError."""
        return expressions.evaluate(expression, variables)

    def render(self, template: str, variables: Mapping[str, Any]) -> str:
        """Replace each ``{{ expression }}``; None renders as "", dicts and lists as JSON."""
        return expressions.render(template, variables)

    # -- scripts -------------------------------------------------------------------------------

    def execute(self, script: str, variables: Mapping[str, Any]) -> dict:
        """Run a script task body; returns the new full variables. Raises ScriptError."""
        if self._closed:
            raise BatonError("The script sandbox is closed.")
        problem, line = script_problem(script)
        if problem:
            raise ScriptError(problem, data={"line": line} if line else None)
        payload = _request(script, variables)
        host = self._idle.get()
        started, outcome = time.perf_counter(), "error"
        try:
            reply = self._call(host, payload)
            outcome = "ok" if reply.get("ok") else "limit" if reply.get("kind") in ("memory", "size") else "error"
        except SandboxLimitError:
            outcome = "limit"
            raise
        finally:
            metrics.SCRIPT_SECONDS.labels(outcome).observe(time.perf_counter() - started)
            if self._closed:
                host.kill()
            self._idle.put(host)
        if reply.get("ok"):
            return reply["variables"]
        kind, line = reply.get("kind"), reply.get("line")
        if kind == "memory":
            raise SandboxLimitError(f"script exceeded the {self.memory_mb} MB memory limit")
        if kind == "size":
            raise SandboxLimitError(reply["message"])
        raise ScriptError(reply["message"], data={"line": line} if line else None)

    def _call(self, host: _Host, payload: bytes) -> dict:
        try:
            try:
                if not host.alive():
                    host.start()  # first use, or the previous process was killed/crashed while idle
                reply = host.call(payload, self.timeout_s)
            except _HostDied as died:
                if not died.before_request:
                    raise
                host.kill()  # it died between our liveness check and the request: one retry
                host.start()
                reply = host.call(payload, self.timeout_s)
        except _Timeout:
            host.kill()
            raise SandboxLimitError(f"script exceeded the {self.timeout_s:g} s time limit") from None
        except _HostDied:
            try:  # the pipe closes a moment before the exit status is there
                code = host.proc.wait(timeout=1) if host.proc else None
            except subprocess.TimeoutExpired:
                code = None
            host.kill()
            if code is not None and code == -getattr(signal, "SIGXCPU", 0):
                raise SandboxLimitError(f"script exceeded the {self.timeout_s:g} s time limit") from None
            raise ScriptError("the script stopped its sandbox process unexpectedly") from None
        if reply.get("kind") == "memory":
            host.kill()  # a host that hit its memory limit may be fragmented: start afresh
        return reply

    def close(self) -> None:
        """Stop all hosts. A script running right now fails with a ScriptError."""
        self._closed = True
        self._finalizer.detach()
        idle = []
        while True:
            try:
                idle.append(self._idle.get_nowait())
            except queue.Empty:
                break
        for host in self._hosts:
            if host in idle:
                host.kill()
            elif host.proc is not None:
                # In use: only signal it; its caller sees the pipe close and cleans up.
                try:
                    host.proc.kill()
                except OSError:
                    pass
        for host in idle:
            self._idle.put(host)  # dead but present, so a racing execute() cannot block forever


def _request(script: str, variables: Mapping[str, Any]) -> bytes:
    """The request line; a variable that JSON cannot carry is named in the ScriptError."""
    try:
        return json.dumps({"script": script, "variables": dict(variables)},
                          separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    except (TypeError, ValueError, RecursionError):
        pass
    for key, value in variables.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError, RecursionError) as exc:
            why = type(value).__name__ if isinstance(exc, TypeError) else str(exc)
            raise ScriptError(f"variable '{key}' is not JSON-serializable ({why})") from None
    raise ScriptError("the variables are not JSON-serializable (non-text keys?)")
