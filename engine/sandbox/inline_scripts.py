"""Script tasks made only of assignments of expressions (``total = int(amount) * 2``), run in this
process by the expression evaluator instead of a script host: the host's answer, without a round
trip to another process (about 45 µs of the caller's CPU and 60 µs of the host's, per script).

A script qualifies when each statement assigns one expression to one name, and each expression
uses only what the evaluator computes exactly as Python does: constants, names, operators,
comparisons, ``and``/``or``, conditional expressions, subscripts and slices, list, tuple, dict and
set displays, calls of the builtins both have, and method calls (the evaluator allows only those
that build a new value: no mutation, so no aliasing can differ). Its run is bounded as a gateway
condition's is (the evaluator's work budget); its names and the values it leaves go through JSON
as a host's would. Whenever the evaluator cannot give Python's answer (any error, a budget
exceeded, a value JSON cannot carry, a variable named like a builtin the script calls), ``run``
answers None and the script goes to a host like any other, which gives the answer or the error:
the result is always the one a host would give (tests/unit/engine/sandbox/test_inline_scripts.py
compares the two on generated scripts).
"""
from __future__ import annotations

import ast
import functools
import json
import textwrap
from collections.abc import Mapping
from typing import Any

from engine.sandbox import expressions
from engine.sandbox.host import MAX_RESULT_BYTES

# Builtins the evaluator calls as Python does (its round and sum are Python's, with a work budget).
SHARED_FUNCTIONS = frozenset({"len", "str", "int", "float", "bool", "abs", "min", "max", "round", "sorted",
                              "any", "all", "sum", "list", "tuple", "dict", "set"})
_OPERATOR_NODES = (ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
_VALUE_NODES = (ast.Constant, ast.Name, ast.Load, ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare, ast.IfExp,
                ast.Call, ast.keyword, ast.Subscript, ast.Slice, ast.Dict, ast.List, ast.Tuple, ast.Set,
                ast.Attribute)


@functools.lru_cache(maxsize=1024)
def plan(script: str) -> tuple[tuple[tuple[str, str], ...], frozenset[str]] | None:
    """``((name, expression), ...)`` and the builtins it calls, when the script qualifies; else None.
    (A script the host refuses at compile time never gets here: the sandbox checks it first.)"""
    try:
        tree = ast.parse(textwrap.dedent(script))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    steps, called = [], set()
    for statement in tree.body:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name) and not statement.targets[0].id.startswith("_")):
            return None
        for node in ast.walk(statement.value):
            if not isinstance(node, _VALUE_NODES + _OPERATOR_NODES):
                return None
            if isinstance(node, ast.Name) and node.id.startswith("_"):
                return None
            if isinstance(node, ast.Call):
                if isinstance(node.func, ast.Name) and node.func.id in SHARED_FUNCTIONS:
                    called.add(node.func.id)
                elif not (isinstance(node.func, ast.Attribute) and not node.func.attr.startswith("_")):
                    return None
                if any(isinstance(arg, ast.Starred) for arg in node.args) or any(k.arg is None for k in node.keywords):
                    return None
            if isinstance(node, ast.Attribute) and not _is_method_call(node, statement.value):
                return None  # the evaluator reads a dict's keys as attributes; Python does not
        steps.append((statement.targets[0].id, ast.unparse(statement.value)))
    if not steps:
        return None
    return tuple(steps), frozenset(called)


def _is_method_call(attribute: ast.Attribute, root: ast.AST) -> bool:
    return any(isinstance(node, ast.Call) and node.func is attribute for node in ast.walk(root))


def run(script: str, variables: Mapping[str, Any]) -> dict[str, Any] | None:
    """The full new variables, as a host would answer them; None: let a host run it."""
    planned = plan(script)
    if planned is None:
        return None
    steps, called = planned
    try:
        # What a host receives: the variables through JSON.
        seen = json.loads(json.dumps(dict(variables), separators=(",", ":"), ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return None
    hidden = {key: value for key, value in seen.items() if key.startswith("_")}
    names = {key: value for key, value in seen.items() if not key.startswith("_")}
    if called & names.keys():
        return None  # Python would call the variable, not the builtin
    for name, expression in steps:
        try:
            names[name] = expressions.evaluate(expression, names)
        except Exception:  # noqa: BLE001 - any failure: the host gives the answer, or the error
            return None
    result = {key: value for key, value in names.items() if not callable(value)}
    result.update(hidden)
    try:
        # What a host answers: its variables through JSON (no NaN, at most MAX_RESULT_BYTES).
        text = json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    if len(text.encode()) > MAX_RESULT_BYTES - 1024:  # near the host's limit: the host decides
        return None
    return json.loads(text)
