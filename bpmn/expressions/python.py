"""JUEL and FEEL expressions translated at deploy into Baton's sandboxed Python expressions.

``translate`` reads a model's text: ``${...}`` or ``#{...}`` is JUEL (Camunda 7), a leading ``=`` is
FEEL (Camunda 8), anything else is already Python and is returned unchanged. The translation is
checked by the sandbox (``engine.sandbox.check_expression``) like any expression a model carries,
and it is what the stored spec runs: nothing of JUEL or FEEL is evaluated at run time.

Meaning, as Camunda users expect it: ``a.b`` and ``a["b"]`` read a key of a map (``a["b"]``),
``empty x`` is true for null, "", an empty list or map, ``&&``/``and``, ``||``/``or``, ``!``/``not``,
``eq ne lt gt le ge``, ``div mod``, FEEL ``=`` (equality), ``between``, ``not(...)`` and ``if then
else``. There is no type coercion: ``"5" == 5`` is false, and comparing null with a number fails
the instance at the element.
"""
from __future__ import annotations

import keyword
from dataclasses import dataclass

from bpmn.expressions.grammar import parse
from engine.sandbox import check_expression

# Camunda's engine objects: a model that reads them needs Camunda's engine, not a variable.
_ENGINE_OBJECTS = {"execution", "task", "connector", "variableScope", "authenticatedUserId",
                   "camunda", "environment", "externalTask"}


@dataclass(frozen=True)
class Translation:
    dialect: str | None     # "JUEL", "FEEL", or None when the text is Python already
    python: str | None      # the Python expression to run; None when ``problem`` says why not
    problem: str | None     # one sentence (no final full stop) naming what cannot be translated


def dialect_of(text: str) -> tuple[str | None, str]:
    """("JUEL" | "FEEL" | None, the body to parse) of an expression as written in a model."""
    source = text.strip()
    if source.startswith(("${", "#{")) and source.endswith("}"):
        return "JUEL", source[2:-1]
    if source.startswith("="):
        return "FEEL", source[1:]
    if "${" in source or "#{" in source:
        return "JUEL", source  # text around ${...}, or no closing brace: refused by translate
    return None, source


def translate(text: str) -> Translation:
    """The Python for a condition or expression written in JUEL, FEEL or Python."""
    dialect, body = dialect_of(text)
    if dialect is None:
        return Translation(None, body, None)
    if dialect == "JUEL" and (not text.strip().startswith(("${", "#{")) or not text.strip().endswith("}")
                              or "${" in body or "#{" in body):
        return Translation(dialect, None, "only one ${...} holding the whole expression is translated "
                                          "(no text around it, no second ${...})")
    try:
        python = to_python(parse(body, dialect.lower(), offset=2 if dialect == "JUEL" else 1))
    except (ValueError, RecursionError) as exc:
        return Translation(dialect, None, str(exc) if not isinstance(exc, RecursionError)
                           else "the expression is nested too deeply")
    problem = check_expression(python)
    if problem is not None:
        return Translation(dialect, None, f"its translation '{python}' is refused by the sandbox: {problem}")
    return Translation(dialect, python, None)


def to_python(node) -> str:
    """Python source for a tree of ``bpmn.expressions.grammar``; every operation is parenthesized, so
    JUEL's left-associative comparisons never become Python's chained ones."""
    kind = node[0]
    if kind == "lit":
        return repr(node[1])
    if kind == "name":
        return python_name(node[1])
    if kind == "get":
        return f"{to_python(node[1])}[{to_python(node[2])}]"
    if kind == "has":
        return f"({to_python(node[2])} in {to_python(node[1])})"
    if kind == "not":
        return f"(not {to_python(node[1])})"
    if kind == "neg":
        return f"(-{to_python(node[1])})"
    if kind == "empty":
        return f'({to_python(node[1])} in (None, "", [], {{}}))'
    if kind in ("bool", "cmp", "arith"):
        return f"({to_python(node[2])} {node[1]} {to_python(node[3])})"
    if kind == "cond":
        return f"({to_python(node[2])} if {to_python(node[1])} else {to_python(node[3])})"
    if kind == "between":
        value = to_python(node[1])
        return f"({to_python(node[2])} <= {value} and {value} <= {to_python(node[3])})"
    raise ValueError(f"unknown node {kind}")  # a bug of the grammar, reported as a refusal


def python_name(name: str) -> str:
    """A variable name as Python reads it, or ValueError when no Python expression can name it."""
    if name in _ENGINE_OBJECTS:
        raise ValueError(f"'{name}' is an object of Camunda's engine, which Baton does not have; "
                         "read the process variable itself")
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("__"):
        raise ValueError(f"the variable name '{name}' cannot be used in a Baton expression")
    return name
