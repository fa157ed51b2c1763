"""The child side of the script sandbox: one persistent "host" process that runs script tasks.

``engine.sandbox.Sandbox`` starts this file with ``python -I`` (no environment variables, no user
site, no script directory on ``sys.path``), so it imports nothing from Baton: only the standard
library and RestrictedPython. The parent imports :func:`script_problem` from here so that the
deploy-time check and the run-time check are the same code.

Protocol: one JSON object per line. The host writes ``{"ready": true}`` once it has locked itself
down, then answers each request ``{"script": str, "variables": {...}}`` with either
``{"ok": true, "variables": {...}}`` or ``{"ok": false, "kind": "script"|"memory"|"size",
"message": str, "line": int|null}``. The parent enforces the wall-clock limit by killing us; the
limits set here (address space, CPU, no new files or processes) are what a script cannot escape
even if it got out of RestrictedPython.

Arguments: ``memory_mb timeout_s uid:gid`` (``-``: keep our user). Started as root, the host drops
to that unprivileged user and group right after its imports (before it reads any request), which
also ends every capability it had, and makes itself non-dumpable (no other process of that user
may read its memory). ``probe uid:gid`` only checks that the start and the drop work (the parent
probes a bubblewrap launch that way).

Test-only: when the parent passes ``BATON_TEST_ONLY_UNRESTRICTED_HOSTS=1`` in our environment
(only tests/integration/test_script_hosts.py sets it, in its own process), a request
``{"unrestricted": source}`` runs that source as plain Python and answers what it leaves in
``result``: a planted "escaped script" to test what the limits and the namespaces still stop.
The parent never sends such a request itself, and without that variable it is an error.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import json
import operator
import os
import re
import resource
import signal
import sys
import textwrap
import threading
import warnings

from RestrictedPython import compile_restricted_exec
from RestrictedPython.Guards import (full_write_guard, guarded_iter_unpack_sequence, guarded_unpack_sequence,
                                     safer_getattr_raise)

SCRIPT_FILENAME = "<script>"
MAX_SCRIPT_CHARS = 100_000
MAX_RANGE = 1_000_000
MAX_RESULT_BYTES = 16 * 1024 * 1024
MAX_MESSAGE_CHARS = 500

_RESTRICTED_ERROR = re.compile(r"^Line (\d+|None): (.*?)\.?$", re.S)


# ---------------------------------------------------------------------------------------------
# Static checks (shared with the parent's check_script)

def script_problem(source: object) -> tuple[str | None, int | None]:
    """(None, None) if RestrictedPython and our rules accept the script, else (why, line or None)."""
    if not isinstance(source, str):
        return "the script is not text", None
    return _compile(source)[1:]


_WARNINGS_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet_warnings():
    """Compile-time warnings ("is" with a literal, invalid escapes) are not errors of user code;
    under ``-W error`` they would turn into SyntaxErrors. The lock keeps two threads from
    interleaving the save/restore of the global warning filters."""
    with _WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@functools.lru_cache(maxsize=1024)
def _compile(source: str):
    """(code, None, None) or (None, reason, line). Cached: a script compiles once per process."""
    if len(source) > MAX_SCRIPT_CHARS:
        return None, f"the script is longer than {MAX_SCRIPT_CHARS:,} characters", None
    # BPMN editors often indent the body inside <bpmn:script>; line numbers are unchanged.
    source = textwrap.dedent(source)
    try:
        with quiet_warnings():
            tree = ast.parse(source, SCRIPT_FILENAME)
    except SyntaxError as exc:
        return None, f"SyntaxError: {exc.msg} (line {exc.lineno})", exc.lineno
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
        return None, f"the script cannot be parsed: {exc}", None
    for node in ast.walk(tree):
        # RestrictedPython would compile these and fail at run time with an obscure message.
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return None, f"imports are not allowed (line {node.lineno})", node.lineno
        if isinstance(node, ast.ClassDef):
            return None, f"class definitions are not allowed (line {node.lineno})", node.lineno
    try:
        with quiet_warnings():
            result = compile_restricted_exec(source, filename=SCRIPT_FILENAME)
    except SyntaxError as exc:  # found by the compiler, not the parser: 'return' outside function
        return None, f"SyntaxError: {exc.msg} (line {exc.lineno})", exc.lineno
    if result.errors:
        match = _RESTRICTED_ERROR.match(result.errors[0])
        if not match:
            return None, result.errors[0], None
        line = int(match.group(1)) if match.group(1).isdigit() else None
        text = match.group(2)
        return None, f"{text} (line {line})" if line else text, line
    return result.code, None, None


# ---------------------------------------------------------------------------------------------
# What a script can see

def _safe_range(*args):
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise ValueError(f"range() is limited to {MAX_RANGE:,} items")
    return r


class _NoPrint:
    """RestrictedPython turns print() into calls on this; scripts have no console, so drop it."""

    def __init__(self, _getattr_=None):
        pass

    def _call_print(self, *objects, **kwargs):
        pass

    def __call__(self):  # the 'printed' variable
        return ""


_INPLACE = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow,
    "<<=": operator.ilshift, ">>=": operator.irshift, "&=": operator.iand,
    "|=": operator.ior, "^=": operator.ixor,
}


def _inplacevar(op, x, y):
    return _INPLACE[op](x, y)


def _getitem(obj, index):
    return obj[index]


def _apply(func, *args, **kwargs):  # f(*a, **kw); arguments are plain data here
    return func(*args, **kwargs)


# Functions, never modules: a module hands out everything it imported (``uuid.os.system``).
_BUILTINS = {name: getattr(builtins, name) for name in (
    "abs", "all", "any", "bool", "chr", "dict", "divmod", "enumerate", "filter", "float",
    "frozenset", "int", "isinstance", "len", "list", "map", "max", "min", "ord", "pow", "repr",
    "reversed", "round", "set", "sorted", "str", "sum", "tuple", "zip",
    "Exception", "ArithmeticError", "AssertionError", "IndexError", "KeyError", "LookupError",
    "TypeError", "ValueError", "ZeroDivisionError",
)}
_BUILTINS.update({"range": _safe_range, "None": None, "True": True, "False": False})

_GLOBALS = {
    "__builtins__": _BUILTINS,
    "__name__": "script",
    "_getattr_": safer_getattr_raise,  # the plain safer_getattr returns None for missing attributes
    "_getitem_": _getitem,
    "_getiter_": iter,
    "_write_": full_write_guard,
    "_inplacevar_": _inplacevar,
    "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
    "_unpack_sequence_": guarded_unpack_sequence,
    "_apply_": _apply,
    "_print_": _NoPrint,
}


# ---------------------------------------------------------------------------------------------
# Running one script

def _script_line(tb) -> int | None:
    """The innermost line of the script itself in a traceback (not of our guards)."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == SCRIPT_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _failure(kind: str, message: str, line: int | None = None) -> dict:
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "..."
    return {"ok": False, "kind": kind, "message": message, "line": line}


def run(script: str, variables: dict) -> dict:
    """Run one script on a copy of the variables; the reply carries the full new variables."""
    code, problem, line = _compile(script)
    if problem:
        return _failure("script", problem, line)
    # Names starting with "_" cannot be used by a restricted script and would shadow our guards:
    # keep them out of its namespace and hand them back untouched.
    hidden = {k: v for k, v in variables.items() if k.startswith("_")}
    namespace = {k: v for k, v in variables.items() if not k.startswith("_")}
    namespace.update(_GLOBALS)
    try:
        exec(code, namespace)  # noqa: S102 - restricted bytecode, guarded globals, no real builtins
    except MemoryError:
        namespace = None  # free the script's data before we build the reply
        return _failure("memory", "the script ran out of memory")
    except Exception as exc:  # noqa: BLE001 - any script failure is reported, never raised
        line = _script_line(exc.__traceback__)
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return _failure("script", f"{text} (line {line})" if line else text, line)
    result = {}
    for key, value in namespace.items():
        # Like SpiffWorkflow's own engine: functions the script defined are not data.
        if key.startswith("_") or callable(value):
            continue
        result[key] = value
    result.update(hidden)
    return {"ok": True, "variables": result}


def encode(reply: dict) -> bytes:
    """The reply as one JSON line; a value JSON cannot carry becomes an error naming its variable."""
    try:
        data = json.dumps(reply, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except MemoryError:
        return encode(_failure("memory", "the script's result did not fit in memory"))
    except (TypeError, ValueError, RecursionError):
        for key, value in reply.get("variables", {}).items():
            try:
                json.dumps(value, allow_nan=False)  # NaN and Infinity are not JSON: no database keeps them
            except (TypeError, ValueError, RecursionError) as exc:
                why = type(value).__name__ if isinstance(exc, TypeError) else str(exc)
                return encode(_failure("script", f"variable '{key}' is not JSON-serializable ({why})"))
        return encode(_failure("script", "the script's result is not JSON-serializable"))
    if len(data) > MAX_RESULT_BYTES:
        return encode(_failure("size", f"the script's variables exceed {MAX_RESULT_BYTES // 2**20} MB"))
    return data + b"\n"


# ---------------------------------------------------------------------------------------------
# The process

def _address_space_in_use() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for row in status:
                if row.startswith("VmSize:"):
                    return int(row.split()[1]) * 1024
    except OSError:
        pass
    return 64 * 2**20


def _lock_down(memory_mb: int) -> None:
    """Limits a script cannot lift: memory, no new files/sockets, no child processes, no cores."""
    # The interpreter and its imports are already mapped: the script gets memory_mb on top.
    limit = _address_space_in_use() + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for which in ("RLIMIT_CORE", "RLIMIT_FSIZE", "RLIMIT_NPROC"):
        if hasattr(resource, which):
            try:
                resource.setrlimit(getattr(resource, which), (0, 0))
            except (ValueError, OSError):
                pass
    # Every descriptor below the lowest free one is taken, so this forbids any new one.
    lowest_free = 0
    while True:
        try:
            os.fstat(lowest_free)
        except OSError:
            break
        lowest_free += 1
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, lowest_free))


def _arm_cpu_limit(timeout_s: float) -> None:
    """Backstop for the parent's wall clock: SIGXCPU ends us if a script burns more CPU than that."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime + timeout_s) + 2
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _drop_privileges(ids: str) -> None:
    """Become ``uid:gid`` for good (real, effective and saved ids; no supplementary groups)."""
    try:
        import ctypes  # imported while the interpreter's files are surely readable

        libc = ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        libc = None
    if ids != "-":
        uid, gid = (int(part) for part in ids.split(":"))
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
            raise SystemExit("the script host could not drop its privileges")
    if libc is not None:  # no ptrace or /proc/<pid>/mem of this process for another of the same user
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0 (after the change of user, which resets it)


def _warm_up() -> None:
    """Load what running a script loads lazily, while our files are still readable (a host that
    dropped to another user may no longer reach the interpreter's directory)."""
    run("x = [str(i) + 'a' for i in range(3)]\ny = {'k': 1.5, 'l': sorted(x)}\nz = '%s' % len(y)\n"
        "try:\n    int('no')\nexcept ValueError as e:\n    w = str(e)\n", {"v": 1})
    run("1 / 0", {})
    encode({"ok": True, "variables": {"x": [1, "b", None, 1.5]}})
    _address_space_in_use()  # the ascii codec


def _unrestricted(source: str) -> dict:
    """TEST-ONLY (see the module's doc): plain Python, as an escaped script would run."""
    namespace: dict = {}
    try:
        exec(source, namespace)  # noqa: S102 - test-only, enabled by the test's environment only
    except BaseException as exc:  # noqa: BLE001 - the test reads what happened
        return {"ok": True, "result": {"raised": f"{type(exc).__name__}: {exc}"}}
    return {"ok": True, "result": namespace.get("result")}


def main(argv: list[str]) -> int:
    if argv[1] == "probe":
        _drop_privileges(argv[2])
        sys.stdout.write("probe ok\n")
        return 0
    memory_mb, timeout_s = int(argv[1]), float(argv[2])
    _warm_up()
    _drop_privileges(argv[3] if len(argv) > 3 else "-")
    test_escape = os.environ.get("BATON_TEST_ONLY_UNRESTRICTED_HOSTS") == "1"
    # Ignored or blocked signals survive exec: make sure the CPU backstop can still end us.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for name in ("SIGXCPU", "SIGXFSZ", "SIGTERM"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    # Our protocol owns the original stdin/stdout; anything else writing to fd 1 goes nowhere.
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    sys.stdin = sys.stdout = None
    _lock_down(memory_mb)
    replies.write(b'{"ready":true}\n')
    replies.flush()
    for line in requests:
        try:
            request = json.loads(line)
            _arm_cpu_limit(timeout_s)
            if test_escape and "unrestricted" in request:
                reply = _unrestricted(request["unrestricted"])
            else:
                reply = run(request["script"], request["variables"])
        except MemoryError:
            reply = _failure("memory", "the script's variables did not fit in memory")
        except Exception as exc:  # noqa: BLE001 - a malformed request must not kill the host
            reply = _failure("script", f"bad request to the script host: {type(exc).__name__}")
        replies.write(encode(reply))
        replies.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
