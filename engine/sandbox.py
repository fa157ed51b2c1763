"""Where user code runs: gateway conditions, timer expressions, templates and script tasks.

Two mechanisms, because the two kinds of code differ:

* Expressions (conditions, timers, ``{{ }}`` templates) are evaluated in-process by simpleeval on
  an AST parsed once per expression string. They cannot loop, and every operation that could build
  something huge is size-checked, so they need no process boundary and stay fast.
* Scripts (script tasks) are Python under RestrictedPython, which blocks imports, dunders and class
  walking but not ``while True`` or ``9**9**9``. They run in a small pool of persistent child
  processes (``engine/sandbox_host.py``) that limit their own memory, CPU, files and processes;
  the parent enforces the wall clock by killing a host and starting a fresh one.

``SandboxScriptEngine`` plugs both into SpiffWorkflow 3.2 so that no ``eval``/``exec`` with real
builtins ever runs. Failures are ``ScriptError`` (``SandboxLimitError`` for time/memory/size).
"""
from __future__ import annotations

import ast
import functools
import json
import math
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import ChainMap
from collections.abc import Mapping
from typing import Any

from simpleeval import (DEFAULT_OPERATORS, AttributeDoesNotExist, EvalWithCompoundTypes,
                        FeatureNotAvailable, FunctionNotDefined, IterableTooLong, NameNotDefined,
                        NumberTooHigh)
from SpiffWorkflow.bpmn.exceptions import WorkflowTaskException
from SpiffWorkflow.bpmn.script_engine.python_engine import PythonScriptEngine
from SpiffWorkflow.bpmn.script_engine.python_environment import BasePythonScriptEngineEnvironment

from engine.errors import BatonError, SandboxLimitError, ScriptError
from engine.sandbox_host import quiet_warnings, script_problem

__all__ = ["Sandbox", "SandboxScriptEngine", "check_expression", "check_script", "check_template",
           "script_error_of"]

# =============================================================================================
# Expressions

MAX_EXPRESSION_CHARS = 20_000
MAX_SEQUENCE = 100_000     # longest str/list/... a single operation may build
MAX_COST = 2_000_000       # items built or walked by one evaluation (bounds its time and memory)
MAX_INT_BITS = 100_000     # ~30,000 decimal digits
MAX_FORMAT_NUMBER = 1_000  # widths/precisions in f-string format specs


def _too_long(n: int) -> None:
    if n > MAX_SEQUENCE:
        raise IterableTooLong(f"a value of {n:,} items is longer than the {MAX_SEQUENCE:,} allowed")


def _too_big(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise NumberTooHigh(f"a number of about {bits:,} bits is larger than the {MAX_INT_BITS:,} allowed")


_SIZED = (str, bytes, list, tuple, dict, set, frozenset)
_SIZED_TYPES = frozenset(_SIZED)  # exact-type lookup for the hot comparison path


def _sized(value: Any) -> bool:
    return isinstance(value, _SIZED)


def _add(a, b):
    if _sized(a) and _sized(b):
        _too_long(len(a) + len(b))
    return a + b


def _mult(a, b):
    if isinstance(a, int) and isinstance(b, int):
        _too_big(a.bit_length() + b.bit_length())
    elif _sized(a) and isinstance(b, int):
        _too_long(len(a) * b)
    elif _sized(b) and isinstance(a, int):
        _too_long(len(b) * a)
    return a * b


def _pow(a, b):
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        _too_big(abs(a).bit_length() * b)  # checked before computing: 9**9**9 never starts
    return a ** b


def _mod(a, b):
    # '%9999999999d' % 1 would build gigabytes before any check could see the result.
    if isinstance(a, (str, bytes)):
        raise FeatureNotAvailable("'%' formatting of strings is not available; use an f-string")
    return a % b


def _lshift(a, b):
    if isinstance(a, int) and isinstance(b, int) and b > 0:
        _too_big(a.bit_length() + b)
    return a << b


_OPERATORS = {**DEFAULT_OPERATORS, ast.Add: _add, ast.Mult: _mult, ast.Pow: _pow,
              ast.Mod: _mod, ast.LShift: _lshift}


def _round(number, ndigits=None):
    if ndigits is not None and abs(ndigits) > 100:  # round(1, -10**9) computes 10**(10**9)
        raise ValueError("round() digits must be between -100 and 100")
    return round(number, ndigits) if ndigits is not None else round(number)


def _sum(items, start=0):
    # Numbers only: sum() over lists is quadratic and can build huge values.
    total = start
    for item in items:
        if not isinstance(item, (int, float)):
            raise TypeError("sum() adds numbers only")
        total += item
    return total


_FUNCTIONS = {
    "len": len, "str": str, "int": int, "float": float, "bool": bool, "abs": abs, "min": min,
    "max": max, "round": _round, "sorted": sorted, "any": any, "all": all, "sum": _sum,
    "list": list, "tuple": tuple, "dict": dict, "set": set,
}


def _checked_join(s: str):
    def join(items):
        items = list(items)
        _too_long(sum(len(i) for i in items if isinstance(i, str)) + len(s) * max(len(items) - 1, 0))
        return s.join(items)
    return join


def _checked_replace(s: str):
    def replace(old, new, count=-1):
        if isinstance(old, str) and isinstance(new, str) and len(new) > len(old):
            hits = s.count(old) if count < 0 else min(count, s.count(old))
            _too_long(len(s) + hits * (len(new) - len(old)))
        return s.replace(old, new, count)
    return replace


# Read-only methods that cannot amplify their input (no center/ljust/zfill/translate/format).
_STR_METHODS = frozenset({
    "capitalize", "casefold", "count", "endswith", "find", "index", "isalnum", "isalpha",
    "isascii", "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "istitle", "isupper",
    "lower", "lstrip", "partition", "removeprefix", "removesuffix", "rfind", "rindex",
    "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
    "title", "upper", "join", "replace",
})
_METHODS: dict[type, frozenset] = {
    str: _STR_METHODS,
    dict: frozenset({"get", "keys", "values", "items"}),  # no pop/update: conditions never mutate
    list: frozenset({"index", "count"}),
    tuple: frozenset({"index", "count"}),
    set: frozenset({"union", "intersection", "difference", "symmetric_difference", "issubset",
                    "issuperset", "isdisjoint"}),
    frozenset: frozenset({"union", "intersection", "difference", "symmetric_difference",
                          "issubset", "issuperset", "isdisjoint"}),
    int: frozenset({"bit_length"}),
    float: frozenset({"is_integer"}),
}
_WRAPPED = {(str, "join"): _checked_join, (str, "replace"): _checked_replace}

# Node types an expression may contain; everything else (lambda, :=, set comprehensions, await,
# starred arguments ...) is refused when the expression is parsed.
_ALLOWED_NODES = frozenset({
    ast.Expression, ast.Constant, ast.Name, ast.Load, ast.Store, ast.UnaryOp, ast.BinOp,
    ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.IfExp, ast.Call, ast.keyword, ast.Subscript,
    ast.Attribute, ast.Slice, ast.JoinedStr, ast.FormattedValue, ast.Dict, ast.List, ast.Tuple,
    ast.Set, ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.comprehension,
    *_OPERATORS,
})
_FORBIDDEN_ATTRS = frozenset({"format", "format_map", "mro", "gi_frame", "cr_frame", "ag_frame",
                              "tb_frame", "f_globals", "f_locals", "f_builtins", "func_globals"})


class _Evaluator(EvalWithCompoundTypes):
    """simpleeval with a work budget, an attribute allow-list and dotted access to dict keys.

    Every operation on a str/list/dict/... costs its length, and every value built costs its
    size, so neither ``[x in big for x in ...]`` nor ``[[0]*99999 for ...]`` can hold a server
    thread or its memory for long. Instances carry per-evaluation state (names, cost), so each
    thread owns one.
    """

    def __init__(self) -> None:
        operators = dict(_OPERATORS)
        for op_type in (ast.In, ast.NotIn, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE):
            operators[op_type] = self._costed_comparison(operators[op_type])
        super().__init__(operators=operators, names={})
        # Replaces simpleeval's defaults (which include rand/randint) with ours, each costed.
        self.functions = {name: self._costed(f) for name, f in _FUNCTIONS.items()}
        self.cost = 0
        for node_type in (ast.BinOp, ast.Call, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict,
                          ast.Set, ast.ListComp, ast.GeneratorExp, ast.DictComp):
            self.nodes[node_type] = self._charging(self.nodes[node_type])

    def _spend(self, n: int) -> None:
        self.cost += n
        if self.cost > MAX_COST:
            raise IterableTooLong(f"the expression does more than {MAX_COST:,} steps of work")

    def _costed(self, func, receiver=None):
        """func, charging the length of its receiver and of each sized argument."""
        def costed(*args, **kwargs):
            for value in (receiver, *args, *kwargs.values()):
                if _sized(value):
                    self._spend(len(value))
            return func(*args, **kwargs)
        return costed

    def _costed_comparison(self, op):
        """A comparison charging the length of sized operands (the hot path: kept lean)."""
        def compare(a, b):
            if type(a) in _SIZED_TYPES:
                self._spend(len(a))
            if type(b) in _SIZED_TYPES:
                self._spend(len(b))
            return op(a, b)
        return compare

    def _charging(self, handler):
        """handler, charging the size of the value it built."""
        def charged(node):
            value = handler(node)
            if _sized(value):
                _too_long(len(value))
                self._spend(len(value))
            elif type(value) is int:
                _too_big(value.bit_length())
            return value
        return charged

    def _eval_subscript(self, node):
        value = super()._eval_subscript(node)
        if isinstance(node.slice, ast.Slice) and _sized(value):  # a slice is a copy
            self._spend(len(value))
        return value

    def _eval_attribute(self, node):
        attr = node.attr
        if attr.startswith("_") or attr in _FORBIDDEN_ATTRS:
            raise FeatureNotAvailable(f"access to '.{attr}' is not allowed")
        obj = self._eval(node.value)
        if isinstance(obj, Mapping) and attr in obj:  # order.total reads a key of the data
            return obj[attr]
        kind = type(obj)
        if attr not in _METHODS.get(kind, ()):
            if isinstance(obj, Mapping):
                raise KeyError(attr)
            raise AttributeDoesNotExist(attr, self.expr)
        wrap = _WRAPPED.get((kind, attr))
        return self._costed(wrap(obj) if wrap else getattr(obj, attr), receiver=obj)

    def _eval_formattedvalue(self, node):
        value = self._eval(node.value)
        if node.conversion == ord("r"):
            value = repr(value)
        elif node.conversion == ord("a"):
            value = ascii(value)
        elif node.conversion == ord("s"):
            value = str(value)
        if not node.format_spec:
            return value
        spec = self._eval(node.format_spec)
        if any(int(n) > MAX_FORMAT_NUMBER for n in re.findall(r"\d+", spec)):
            raise IterableTooLong(f"format widths and precisions are limited to {MAX_FORMAT_NUMBER}")
        return format(value, spec)


def _reason(exc: BaseException) -> str:
    """One sentence for an expression failure, in Python's own words where possible."""
    if isinstance(exc, NameNotDefined):
        return f"name '{exc.name}' is not defined"
    if isinstance(exc, FunctionNotDefined):
        return f"function '{exc.func_name}' is not available"
    if isinstance(exc, AttributeDoesNotExist):
        return f"attribute '{exc.attr}' is not available"
    if isinstance(exc, FeatureNotAvailable):
        return str(exc)
    if isinstance(exc, SyntaxError):
        return f"invalid syntax: {exc.msg} (line {exc.lineno})"
    if isinstance(exc, RecursionError):
        return "the expression is nested too deeply"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@functools.lru_cache(maxsize=4096)
def _parse_expression(expression: str) -> ast.expr:
    """Parse and statically check an expression once; raises ScriptError (not cached)."""
    if not isinstance(expression, str):
        raise ScriptError("the expression is not text")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ScriptError(f"the expression is longer than {MAX_EXPRESSION_CHARS:,} characters")
    try:
        # mode="eval": one expression only, so no statements, imports or assignments.
        with quiet_warnings():
            tree = ast.parse(expression.strip(), "<expression>", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ScriptError(_reason(exc)) from None
    for node in ast.walk(tree):
        if type(node) not in _ALLOWED_NODES:
            raise ScriptError(f"{type(node).__name__} is not allowed in an expression")
        if isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in _FORBIDDEN_ATTRS):
            raise ScriptError(f"access to '.{node.attr}' is not allowed")
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                if node.func.id not in _FUNCTIONS:
                    raise ScriptError(f"function '{node.func.id}' is not available")
            elif not isinstance(node.func, ast.Attribute):
                raise ScriptError("only named functions and methods can be called")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise ScriptError(f"name '{node.id}' is not allowed")
    return tree.body


def check_expression(source: str) -> str | None:
    """None if the sandbox accepts this condition/expression, else one sentence why not."""
    try:
        _parse_expression(source)
    except ScriptError as exc:
        return exc.message
    return None


def check_template(template: str) -> str | None:
    """None if every ``{{ expression }}`` of a template is acceptable, else the first reason."""
    for _literal, expression in _parse_template(template):
        problem = expression is not None and check_expression(expression)
        if problem:
            return f"{{{{ {expression} }}}}: {problem}"
    return None


def check_script(source: str) -> str | None:
    """None if the sandbox accepts this script task body, else one sentence why not."""
    return script_problem(source)[0]


_TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.S)


@functools.lru_cache(maxsize=1024)
def _parse_template(template: str) -> tuple[tuple[str, str | None], ...]:
    """Split a template into (literal, expression-or-None) pieces, once per template."""
    pieces, pos = [], 0
    for match in _TEMPLATE.finditer(template):
        pieces.append((template[pos:match.start()], match.group(1).strip()))
        pos = match.end()
    pieces.append((template[pos:], None))
    return tuple(pieces)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):  # readable in a message or prompt, unlike a Python repr
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


# =============================================================================================
# Script hosts

_HOST_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_host.py")
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


# =============================================================================================
# The sandbox

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
        self._local = threading.local()
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
        node = _parse_expression(expression)
        evaluator = getattr(self._local, "evaluator", None)
        if evaluator is None:
            evaluator = self._local.evaluator = _Evaluator()
        evaluator.names = variables
        evaluator.cost = 0
        try:
            return evaluator.eval(expression, previously_parsed=node)
        except (IterableTooLong, NumberTooHigh) as exc:
            raise SandboxLimitError(f"the expression is too expensive: {exc}") from None
        except (ScriptError, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001 - every failure of user code is a ScriptError
            raise ScriptError(_reason(exc)) from None
        finally:
            evaluator.names = {}  # do not keep the caller's data alive

    def render(self, template: str, variables: Mapping[str, Any]) -> str:
        """Replace each ``{{ expression }}``; None renders as "", dicts and lists as JSON."""
        out = []
        for literal, expression in _parse_template(template):
            out.append(literal)
            if expression is not None:
                out.append(_text(self.evaluate(expression, variables)))
        return "".join(out)

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
        try:
            reply = self._call(host, payload)
        finally:
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


# =============================================================================================
# SpiffWorkflow 3.2

class _SandboxEnvironment(BasePythonScriptEngineEnvironment):
    """SpiffWorkflow calls the environment directly in some places (process completion
    conditions, message correlations), so the sandbox is plugged in here, not only in the engine."""

    def __init__(self, sandbox: Sandbox) -> None:
        super().__init__({})
        self.sandbox = sandbox

    def evaluate(self, expression, context, external_context=None):
        names = ChainMap(context, external_context) if external_context else context
        return self.sandbox.evaluate(expression, names)

    def execute(self, script, context, external_context=None):
        variables = {**external_context, **context} if external_context else context
        result = self.sandbox.execute(script, variables)
        for key in external_context or ():  # data objects live in the workflow, not the task
            if key not in context:
                result.pop(key, None)
        context.clear()  # replace, so that `del x` in the script removes x
        context.update(result)
        return True

    def call_service(self, context, **kwargs):
        raise ScriptError("service tasks are not run by the script engine")


class SandboxScriptEngine(PythonScriptEngine):
    """SpiffWorkflow's script engine, backed by a Sandbox.

    How a caller finds our error: SpiffWorkflow raises ``WorkflowTaskException`` from
    ``workflow.do_engine_steps()``/``task.run()``; the ``ScriptError`` (or ``SandboxLimitError``)
    is its ``exception`` attribute and also its ``__cause__``. Some SpiffWorkflow paths call the
    environment directly and let the ``ScriptError`` itself propagate. ``script_error_of(exc)``
    handles every case and returns the ScriptError or None.
    """

    def __init__(self, sandbox: Sandbox) -> None:
        super().__init__(environment=_SandboxEnvironment(sandbox))
        self.sandbox = sandbox

    def validate(self, expression):
        problem = check_expression(expression)
        if problem:
            raise ScriptError(problem)

    def evaluate(self, task, expression, external_context=None):
        try:
            return self.environment.evaluate(expression, task.data, external_context)
        except ScriptError as exc:
            raise _wrapped(WorkflowTaskException(
                f"Error evaluating expression '{expression}': {exc.message}", task=task,
                exception=exc), exc) from exc

    def execute(self, task, script, external_context=None):
        try:
            return self.environment.execute(script, task.data, external_context)
        except ScriptError as exc:
            line = exc.data.get("line")
            lines = script.splitlines()
            error_line = lines[line - 1] if line and 0 < line <= len(lines) else ""
            raise _wrapped(WorkflowTaskException(
                exc.message, task=task, exception=exc, line_number=line,
                error_line=error_line), exc) from exc

    def call_service(self, task, **kwargs):
        raise WorkflowTaskException("service tasks are not run by the script engine", task=task)


def _wrapped(wrapper: WorkflowTaskException, error: ScriptError) -> WorkflowTaskException:
    wrapper.exception = error  # SpiffWorkflow only keeps the class name; keep the error itself
    return wrapper


def script_error_of(exc: BaseException | None) -> ScriptError | None:
    """The ScriptError behind an exception raised while running a workflow, or None."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        if isinstance(current, ScriptError):
            return current
        seen.add(id(current))
        wrapped = getattr(current, "exception", None)
        todo.extend(x for x in (current.__context__, current.__cause__,
                                wrapped if isinstance(wrapped, BaseException) else None) if x)
    return None
