"""Expressions: gateway conditions, timer expressions and ``{{ }}`` templates, evaluated in-process.

simpleeval on an AST parsed and checked once per expression string; expressions cannot loop, and
every operation that could build something huge is size-checked and charged to a work budget, so
they need no process boundary (docs/bpmn-profile.md, "The sandbox"). Failures are ``ScriptError``
(``SandboxLimitError`` when too expensive).
"""
from __future__ import annotations

import ast
import functools
import json
import re
import threading
from collections.abc import Mapping
from typing import Any

from simpleeval import (DEFAULT_OPERATORS, AttributeDoesNotExist, EvalWithCompoundTypes, FeatureNotAvailable,
                        FunctionNotDefined, IterableTooLong, NameNotDefined, NumberTooHigh)

from engine.errors import SandboxLimitError, ScriptError
from engine.sandbox.host import quiet_warnings, script_problem

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


_local = threading.local()  # each thread owns an evaluator (it carries per-evaluation state)


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """The value of one expression; names are the variables. Raises ScriptError."""
    node = _parse_expression(expression)
    evaluator = getattr(_local, "evaluator", None)
    if evaluator is None:
        evaluator = _local.evaluator = _Evaluator()
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


def render(template: str, variables: Mapping[str, Any]) -> str:
    """Replace each ``{{ expression }}``; None renders as "", dicts and lists as JSON."""
    out = []
    for literal, expression in _parse_template(template):
        out.append(literal)
        if expression is not None:
            out.append(_text(evaluate(expression, variables)))
    return "".join(out)
