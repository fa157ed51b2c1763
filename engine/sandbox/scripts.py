"""Script tasks: Python under RestrictedPython, run in a pool of persistent, limited child processes.

RestrictedPython blocks imports, dunders and class walking but not ``while True`` or ``9**9**9``,
so each script runs in a host process (``engine/sandbox/host.py``) that limits its own memory,
CPU, files and processes; the parent enforces the wall clock by killing a host and starting a
fresh one. ``Sandbox`` is the one object the engine holds: expressions in-process, scripts here.

A host belongs to one tenant for its whole life (the pool keys hosts by the tenant the script
engine carries: ``SandboxScriptEngine.for_tenant``), so a script that got out of RestrictedPython
still finds only its own tenant's variables in its process. A host is replaced after
``runs_per_host`` scripts and whenever a script broke a limit (time, memory, size). How hosts are
started is a ``Launch`` (``plan_launch``): when the server runs as root, a host drops to an
unprivileged user right after its imports; where bubblewrap works, it runs in namespaces of its
own (no network, no other process visible, a read-only minimal filesystem and a private /tmp).
docs/operations.md, "Script hosts", says what an escaped script could still reach.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import BatonError, SandboxLimitError, ScriptError
from engine.sandbox import expressions
from engine.sandbox.host import script_problem
from engine.telemetry import metrics

log = logging.getLogger("baton.sandbox")

_HOST_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "host.py")
_START_TIMEOUT_S = 30.0
_PROBE_TIMEOUT_S = 20.0
NAMESPACE_MODES = ("auto", "on", "off")
# Set by a test (and only there) in the environment of the process that owns the pool: the hosts
# it starts then also accept a request that runs unrestricted Python, to plant an "escaped" script
# (tests/integration/test_script_hosts.py). Production never sets it; Sandbox.execute never sends
# such a request.
TEST_ESCAPE_ENV = "BATON_TEST_ONLY_UNRESTRICTED_HOSTS"


# ---------------------------------------------------------------------------------------------
# How hosts are started

@dataclass(frozen=True)
class Launch:
    """How the pool starts a host: a command prefix (bubblewrap and its options, or nothing), the
    user and group a host drops to after its imports (when the server runs as root), and a line
    saying so for the log."""

    prefix: tuple[str, ...] = ()
    drop_to: tuple[int, int] | None = None
    note: str = "hosts run as the server's user, without namespaces"

    @property
    def namespaced(self) -> bool:
        return bool(self.prefix)

    def command(self, *host_args: str) -> list[str]:
        ids = f"{self.drop_to[0]}:{self.drop_to[1]}" if self.drop_to else "-"
        return [*self.prefix, sys.executable, "-I", "-B", _HOST_SCRIPT, *host_args, ids]


def resolve_user(user: str) -> tuple[int, int]:
    """(uid, gid) of a user name or number; a BatonError saying what to do if it is no good."""
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        if not user.isdigit():
            raise BatonError(f"BATON_SCRIPT_USER: there is no user '{user}' (create one, e.g. `useradd --system "
                             "--no-create-home --shell /usr/sbin/nologin baton-sandbox`, or use nobody).") from None
        uid = gid = int(user)  # a number with no passwd entry is a valid, unprivileged id
    if uid == 0 or gid == 0:
        raise BatonError(f"BATON_SCRIPT_USER: '{user}' is root; script hosts need an unprivileged user.")
    return uid, gid


def _mounts() -> list[str]:
    """bubblewrap options for a read-only minimal root: /usr, the libraries, the interpreter, its
    packages and host.py; a fresh /proc (of the host's own pid namespace), /dev and /tmp."""
    # /proc, /dev and /tmp first: a later mount covers an earlier one (Baton may live under /tmp).
    options = ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(16 * 2**20), "--tmpfs", "/tmp",
               "--ro-bind", "/usr", "/usr"]
    for path in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(path):
            options += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            options += ["--ro-bind", path, path]
    import RestrictedPython  # where the host's one third-party package lives

    sources = [sys.base_prefix, sys.prefix, os.path.dirname(sys.executable),
               os.path.dirname(os.path.dirname(os.path.abspath(RestrictedPython.__file__)))]
    bound: list[str] = ["/usr"]
    made: set[str] = {"/tmp"}
    for source in sorted({os.path.abspath(s) for s in sources} | {_HOST_SCRIPT}, key=len):
        if any(source == b or source.startswith(b.rstrip("/") + "/") for b in bound):
            continue
        # The directories leading there are made open (bubblewrap would copy their modes, and
        # /root's 0700 would shut the unprivileged host out of an interpreter under it).
        parent = os.path.dirname(source)
        ancestors = []
        while parent not in ("/", "") and parent not in made:
            ancestors.insert(0, parent)
            parent = os.path.dirname(parent)
        for directory in ancestors:
            options += ["--perms", "0755", "--dir", directory]
            made.add(directory)
        options += ["--ro-bind", source, source]
        bound.append(source)
    options += ["--chdir", "/"]
    return options


def _bwrap_prefix(bwrap: str, as_root: bool) -> tuple[str, ...]:
    namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                  "--hostname", "baton-script", "--die-with-parent", "--new-session"]
    if as_root:
        # No user namespace: the host drops to the real unprivileged user itself, so it keeps
        # only what that takes (its capabilities end with the change of user).
        namespaces += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        namespaces.insert(0, "--unshare-user")
    return (bwrap, *namespaces, *_mounts())


@functools.lru_cache(maxsize=8)
def plan_launch(namespace: str = "auto", user: str = "nobody") -> Launch:
    """How this process starts its hosts. ``namespace``: ``auto`` uses bubblewrap where it works
    (else says why and goes on without), ``on`` requires it, ``off`` never uses it. ``user``: the
    user a host drops to when the server runs as root (ignored otherwise). Probed once per process."""
    if namespace not in NAMESPACE_MODES:
        raise BatonError(f"BATON_SCRIPT_NAMESPACE must be one of {', '.join(NAMESPACE_MODES)}, not '{namespace}'.")
    as_root = os.geteuid() == 0
    drop_to = resolve_user(user) if as_root else None
    who = f"as uid {drop_to[0]} ({user})" if drop_to else f"as the server's user (uid {os.geteuid()})"
    if namespace == "off":
        return Launch((), drop_to, f"hosts run {who}, without namespaces (BATON_SCRIPT_NAMESPACE=off)")
    bwrap = shutil.which("bwrap")
    why = "bubblewrap (bwrap) is not installed" if bwrap is None else None
    if bwrap is not None:
        prefix = _bwrap_prefix(bwrap, as_root)
        probe = Launch(prefix, drop_to).command("probe")
        try:
            done = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True, timeout=_PROBE_TIMEOUT_S,
                                  env={"LC_ALL": "C.UTF-8"}, cwd="/")
            if done.returncode == 0 and done.stdout.strip() == b"probe ok":
                return Launch(prefix, drop_to, f"hosts run {who} in namespaces of bubblewrap "
                                               "(no network, read-only minimal filesystem, own /tmp)")
            why = (f"bubblewrap cannot run here (exit {done.returncode}: "
                   f"{done.stderr.decode(errors='replace').strip()[:300] or done.stdout[:100]!r})")
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"bubblewrap cannot run here ({exc})"
    if namespace == "on":
        raise BatonError(f"BATON_SCRIPT_NAMESPACE=on but {why}.")
    (log.info if bwrap is None else log.warning)("Script hosts without namespaces: %s.", why)
    return Launch((), drop_to, f"hosts run {who}, without namespaces: {why}")


# ---------------------------------------------------------------------------------------------
# One host

class _Timeout(Exception):
    """The host did not answer before the deadline."""


class _HostDied(Exception):
    """The host process ended (or closed its pipe) before answering."""

    def __init__(self, before_request: bool = False) -> None:
        super().__init__()
        self.before_request = before_request  # True: the script never started, retrying is safe


class _Host:
    """One persistent child process of one tenant, used by one caller at a time (the pool
    guarantees that). The object outlives its processes: ``start`` replaces a dead one."""

    def __init__(self, tenant: Any, memory_mb: int, timeout_s: float, launch: Launch) -> None:
        self.tenant = tenant
        self.memory_mb = memory_mb
        self.timeout_s = timeout_s
        self.launch = launch
        self.proc: subprocess.Popen | None = None
        self.buffer = bytearray()
        self.poller: select.poll | None = None
        self.runs = 0  # scripts sent to the current process
        self.ended = "new"  # why the previous process ended: the next start's reason

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.kill()  # reap a dead predecessor and close its pipes
        # subprocess = fork+exec in C: safe from a threaded parent, no Python runs in between,
        # close_fds drops inherited DB sockets, exec resets signal handlers. -I ignores PYTHON*
        # variables and the user site; -B never writes .pyc files (the host's RLIMIT_FSIZE is 0);
        # the environment is empty apart from the locale (and a test's planted escape switch).
        env = {"LC_ALL": "C.UTF-8"}
        if os.environ.get(TEST_ESCAPE_ENV) == "1":
            env[TEST_ESCAPE_ENV] = "1"
        self.proc = subprocess.Popen(
            self.launch.command(str(self.memory_mb), repr(self.timeout_s)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, cwd="/", close_fds=True, start_new_session=True, bufsize=0,
        )
        self.buffer = bytearray()
        self.runs = 0
        self.poller = select.poll()  # not select(): a server's descriptors can exceed 1024
        self.poller.register(self.proc.stdout.fileno(), select.POLLIN)
        try:
            ready = self._read_line(time.monotonic() + _START_TIMEOUT_S)
        except (_HostDied, _Timeout):
            self.kill()
            raise BatonError("The script sandbox could not start its host process "
                             f"(try: {' '.join(self.launch.command('256', '5'))}).") from None
        if json.loads(ready) != {"ready": True}:
            self.kill()
            raise BatonError("The script sandbox host answered unexpectedly.")
        metrics.SCRIPT_HOST_STARTS.labels(self.ended).inc()
        self.ended = "crashed"  # unless kill() says otherwise

    def kill(self, reason: str | None = None) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if reason is not None:
            self.ended = reason
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
        self.runs += 1
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
    for host in list(hosts):
        host.kill()


def _killed_by_cpu_limit(code: int | None) -> bool:
    """SIGXCPU ended the host: its own exit status, or bubblewrap's (128 + the signal)."""
    xcpu = getattr(signal, "SIGXCPU", None)
    return xcpu is not None and code in (-xcpu, 128 + xcpu)


# ---------------------------------------------------------------------------------------------
# The pool

class Sandbox:
    """Evaluates expressions in-process and runs scripts in a pool of limited child processes.

    Thread-safe: each thread gets its own expression evaluator; each script host serves one
    tenant, and one caller at a time. The pool holds at most ``hosts`` hosts: a script of a tenant
    takes an idle host of that tenant, else starts one (first use: the one cold start a tenant
    pays), replacing the least recently used idle host of another tenant when the pool is full.
    Hosts are replaced after ``runs_per_host`` scripts, a timeout, a limit broken or a crash.
    ``tenant_required``: refuse a script that names no tenant (the server's pool). Call
    ``close()`` to stop them (also done at interpreter exit).
    """

    def __init__(self, timeout_s: float = 5.0, memory_mb: int = 256, hosts: int = 2, *,
                 runs_per_host: int = 5000, launch: Launch | None = None, tenant_required: bool = False) -> None:
        if timeout_s <= 0 or memory_mb <= 0 or hosts <= 0 or runs_per_host <= 0:
            raise ValueError("timeout_s, memory_mb, hosts and runs_per_host must be positive")
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.max_hosts = int(hosts)
        self.runs_per_host = int(runs_per_host)
        self.launch = launch if launch is not None else plan_launch()
        self.tenant_required = tenant_required
        self._hosts: list[_Host] = []  # every host object of the pool, in use or idle
        self._idle: list[_Host] = []  # least recently used first
        self._lock = threading.Condition()
        self._closed = False
        self.starts = 0  # host processes started: a tenant's first script, and each replacement
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

    def execute(self, script: str, variables: Mapping[str, Any], tenant: Any = None) -> dict:
        """Run a script task body in a host of ``tenant``; returns the new full variables.
        Raises ScriptError."""
        if self._closed:
            raise BatonError("The script sandbox is closed.")
        if tenant is None and self.tenant_required:
            raise BatonError("A script reached the sandbox without its tenant.")
        problem, line = script_problem(script)
        if problem:
            raise ScriptError(problem, data={"line": line} if line else None)
        payload = _request(script, variables)
        host = self._acquire(tenant)
        started, outcome = time.perf_counter(), "error"
        try:
            reply = self._call(host, payload)
            outcome = "ok" if reply.get("ok") else "limit" if reply.get("kind") in ("memory", "size") else "error"
        except SandboxLimitError:
            outcome = "limit"
            raise
        finally:
            metrics.SCRIPT_SECONDS.labels(outcome).observe(time.perf_counter() - started)
            self._release(host)
        if reply.get("ok"):
            return reply["variables"]
        kind, line = reply.get("kind"), reply.get("line")
        if kind == "memory":
            raise SandboxLimitError(f"script exceeded the {self.memory_mb} MB memory limit")
        if kind == "size":
            raise SandboxLimitError(reply["message"])
        raise ScriptError(reply["message"], data={"line": line} if line else None)

    def _acquire(self, tenant: Any) -> _Host:
        """An idle host of ``tenant``, else a new one (in place of another tenant's idle host when
        the pool is full); waits only if every host is busy."""
        victim = None
        with self._lock:
            while True:
                if self._closed:
                    raise BatonError("The script sandbox is closed.")
                mine = [i for i, host in enumerate(self._idle) if host.tenant == tenant]
                if mine:
                    return self._idle.pop(mine[-1])  # the warmest
                if len(self._hosts) >= self.max_hosts and self._idle:
                    victim = self._idle.pop(0)
                    self._hosts.remove(victim)
                if len(self._hosts) < self.max_hosts:
                    host = _Host(tenant, self.memory_mb, self.timeout_s, self.launch)
                    self._hosts.append(host)
                    break
                self._lock.wait()
        if victim is not None:
            victim.kill("evicted")
        return host

    def _release(self, host: _Host) -> None:
        if self._closed:
            host.kill("closed")
        elif host.alive() and host.runs >= self.runs_per_host:
            host.kill("recycled")
        with self._lock:
            if host in self._hosts:
                self._idle.append(host)
            self._lock.notify()

    def _call(self, host: _Host, payload: bytes) -> dict:
        try:
            try:
                if not host.alive():
                    self._start(host)  # first use, or the previous process was killed/crashed while idle
                reply = host.call(payload, self.timeout_s)
            except _HostDied as died:
                if not died.before_request:
                    raise
                host.kill()  # it died between our liveness check and the request: one retry
                self._start(host)
                reply = host.call(payload, self.timeout_s)
        except _Timeout:
            host.kill("limit")
            raise SandboxLimitError(f"script exceeded the {self.timeout_s:g} s time limit") from None
        except _HostDied:
            try:  # the pipe closes a moment before the exit status is there
                code = host.proc.wait(timeout=1) if host.proc else None
            except subprocess.TimeoutExpired:
                code = None
            if _killed_by_cpu_limit(code):
                host.kill("limit")
                raise SandboxLimitError(f"script exceeded the {self.timeout_s:g} s time limit") from None
            host.kill("crashed")
            raise ScriptError("the script stopped its sandbox process unexpectedly") from None
        if reply.get("kind") in ("memory", "size"):
            host.kill("limit")  # a host that broke a limit is not trusted with the next script
        return reply

    def _start(self, host: _Host) -> None:
        host.start()
        with self._lock:
            self.starts += 1

    def close(self) -> None:
        """Stop all hosts. A script running right now fails with a ScriptError."""
        with self._lock:
            self._closed = True
            idle, self._idle = list(self._idle), []
            busy = [host for host in self._hosts if host not in idle]
            self._lock.notify_all()
        self._finalizer.detach()
        for host in idle:
            host.kill("closed")
        for host in busy:
            # In use: only signal it; its caller sees the pipe close and cleans up.
            proc = host.proc
            if proc is not None:
                try:
                    proc.kill()
                except OSError:
                    pass


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
