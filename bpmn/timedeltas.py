"""SpiffArena's ``timedelta(...)`` timer values, rewritten at deploy as the ISO 8601 text Baton runs.

Older SpiffWorkflow models write a duration as ``timedelta(minutes=5)`` and a cycle as
``(3, timedelta(hours=1))``. SpiffWorkflow 3.2 wants ISO 8601 text, so deploy rewrites them:
literal arguments become a literal (``"PT300S"``, ``"R3/PT3600S"``); arguments that read variables
become a Python expression computing the same text when the timer starts
(``"PT" + str((minutes) * 60) + "S"``). Nothing is evaluated here: the text is only parsed.
"""
from __future__ import annotations

import ast
import json

# timedelta's parameters, in its positional order, with their length in seconds.
_UNITS = {"days": 86400, "seconds": 1, "microseconds": 1e-6, "milliseconds": 1e-3, "minutes": 60,
          "hours": 3600, "weeks": 604800}


def rewrite_timedelta(kind: str, text: str) -> str | None:
    """The Python expression for a ``timedelta`` timer value of ``kind``, None when ``text`` is not
    written with timedelta; ValueError names what cannot be rewritten."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    cycles = None
    if kind == "timeCycle" and isinstance(node, ast.Tuple) and len(node.elts) == 2 and _is_timedelta(node.elts[1]):
        count = node.elts[0]
        if not (isinstance(count, ast.Constant) and type(count.value) is int):
            raise ValueError("the number of repetitions of (n, timedelta(...)) must be a whole number")
        cycles, node = count.value, node.elts[1]
    if not _is_timedelta(node):
        return None
    if kind == "timeDate":
        raise ValueError("a timedelta is a duration; put it in a timeDuration element")
    seconds = _seconds(node)
    prefix = f"R{cycles}/PT" if cycles is not None else "PT"
    if isinstance(seconds, (int, float)):
        return json.dumps(f"{prefix}{_number(seconds)}S")
    return f'"{prefix}" + str({seconds}) + "S"'


def _is_timedelta(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "timedelta"


def _seconds(call: ast.Call):
    """Total seconds: a number when every argument is a literal, else Python source computing it."""
    if len(call.args) > 3:
        raise ValueError("timedelta takes at most days, seconds and microseconds by position")
    parts = list(zip(("days", "seconds", "microseconds"), call.args))
    for keyword in call.keywords:
        if keyword.arg not in _UNITS:
            raise ValueError(f"timedelta has no parameter '{keyword.arg}'")
        parts.append((keyword.arg, keyword.value))
    literals = [_literal_number(v) for _, v in parts]
    if None not in literals:
        total = sum(value * _UNITS[unit] for (unit, _), value in zip(parts, literals))
        if total < 0:
            raise ValueError("the duration is negative")
        return total
    return " + ".join(f"({ast.unparse(v)}) * {_UNITS[unit]}" for unit, v in parts) or "0"


def _literal_number(node):
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None
    return value if type(value) in (int, float) else None


def _number(seconds: float) -> str:
    if float(seconds).is_integer():
        return str(int(seconds))
    return f"{seconds:.6f}".rstrip("0")
