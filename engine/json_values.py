"""What a JSON value Baton keeps may be, and the one strict reader of JSON that comes from outside.

Every value Baton stores must read back on both databases and in every client: so every door
(the JSON-RPC body, webhook, web-chat, task-callback and messenger bodies) parses with ``parse``,
and values made inside (script results, model answers, task data) are checked with ``problem``
before they are saved. The limits, documented in docs/api.md:

- nesting: at most ``MAX_DEPTH`` levels of objects and arrays (counting the outermost);
- numbers: finite doubles (``1e400`` overflows to infinity: refused, like ``NaN`` and
  ``Infinity``), integers within the signed 64-bit range (Camunda's Long);
- text: valid Unicode, no lone surrogate (``"\\ud800"``) in a key or a value.

Rows written before these limits are read by ``read_stored`` (the database engine's JSON
deserializer): a value that cannot be carried becomes the text ``UNREADABLE`` names, so one bad
value degrades one value, never a whole list. Checks walk the value with an explicit stack, never
by recursion: a too-deep value must not crash the check that refuses it.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64
MAX_INT = 2**63 - 1
UNREADABLE = "[unreadable value: {}]"

_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_SHOWN_KEY = 40
_MAX_SHOWN_PATH = 160


class JsonSyntaxError(ValueError):
    """The text is not JSON (or not UTF-8)."""


class JsonValueError(ValueError):
    """A value outside Baton's limits; ``where`` is its path (``params.variables.a[2]``)."""

    def __init__(self, where: str, problem: str):
        if len(where) > _MAX_SHOWN_PATH:  # a path 64 levels deep: its start and its end say enough
            where = where[:_MAX_SHOWN_PATH // 2] + "..." + where[-_MAX_SHOWN_PATH // 4:]
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


class _Constant:
    """What ``NaN``, ``Infinity`` and ``-Infinity`` parse to: found (with its path) by ``problem``."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def parse(data: bytes | str) -> Any:
    """The value of a body. JsonSyntaxError when it is not JSON; JsonValueError (at ``body``) when it
    nests beyond what the parser can take. Values outside the limits are left in place for
    ``problem`` to name: a batch's good requests still run beside a bad one."""
    try:
        return _DOOR_DECODER(data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data)
    except RecursionError:
        raise JsonValueError("body", f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise JsonSyntaxError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except UnicodeDecodeError:
        raise JsonSyntaxError("the body is not valid UTF-8") from None
    except ValueError:  # an integer of more than 4300 digits
        raise JsonSyntaxError("a number with too many digits") from None


def parse_checked(data: bytes | str, where: str = "body") -> Any:
    """``parse``, then ``check``: a value wholly within the limits, or the error naming where it is not."""
    value = parse(data)
    raw = data if isinstance(data, (bytes, bytearray)) else data.encode("utf-8", "surrogatepass")
    if not isinstance(value, (dict, list)) or not _text_is_clean(bytes(raw), value):
        check(value, where)  # the walk that names the place, only when the text hints at one
    return value


def check(value: Any, where: str) -> None:
    found = problem(value, where)
    if found is not None:
        raise found


# Signs in JSON text (as UTF-8 bytes, digits folded to 0 and E to e) that a value may break a
# limit: a long digit run (an integer past 64 bits, a float that overflows), a three-digit
# exponent, an escaped surrogate, NaN or Infinity. A string may hold one too: then the walk
# decides, the check is only slower. Everything here runs at the speed of C.
_FOLD = bytes.maketrans(b"123456789E", b"000000000e")
_LONG_NUMBER = (b"0" * 19, b"e000", b"e+000", b"e-000")
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_CHECK_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, check_circular=False).encode


def _text_is_clean(data: bytes, value: Any, depth: int = 0) -> bool:
    """Whether the JSON ``data`` of ``value`` is surely within the limits: most values are, and the
    walk of ``problem``, which names the place, costs several parses."""
    if b"NaN" in data or b"Infinity" in data:
        return False
    if b"\\u" in data and _ESCAPED_SURROGATE.search(data):
        return False
    folded = data.translate(_FOLD)
    if any(sign in folded for sign in _LONG_NUMBER):
        return False
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH - depth:
        return True
    return _depth_within(value, depth)


def _depth_within(value: Any, depth: int) -> bool:
    """Containers only, no paths: the cheap walk for a value with many objects and arrays."""
    stack = [(value, depth)]
    while stack:
        item, level = stack.pop()
        if level >= MAX_DEPTH:
            return False
        for child in (item.values() if isinstance(item, dict) else item):
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, level + 1))
    return True


def _is_clean(value: Any, depth: int) -> bool:
    try:
        data = _CHECK_ENCODER(value).encode("utf-8")  # a lone surrogate cannot be encoded
    except (ValueError, TypeError, RecursionError):  # NaN/Infinity, a sentinel, a Python object, depth
        return False
    return _text_is_clean(data, value, depth)


def problem(value: Any, where: str, depth: int = 0) -> JsonValueError | None:
    """The first part of ``value`` outside the limits, as an error naming its path; None if all is
    well. ``depth``: the levels ``value`` already sits in (a batch item's params sit in two)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        why = _scalar_problem(value)
        return None if why is None else JsonValueError(where, why)
    if _is_clean(value, depth):
        return None
    return _walk(value, where, depth)


def _walk(value: Any, where: str, depth: int) -> JsonValueError | None:
    """Every part of ``value``, with its path: the slow check that names the place."""
    stack: list[tuple[Any, str, int]] = [(value, where, depth)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict):
            if depth >= MAX_DEPTH:
                return JsonValueError(path, f"nested deeper than {MAX_DEPTH} levels")
            for key, child in item.items():
                child_path = f"{path}.{_shown(key)}"
                if isinstance(key, str) and _SURROGATE.search(key):
                    return JsonValueError(child_path, "the key is not valid Unicode (a lone surrogate)")
                stack.append((child, child_path, depth + 1))
        elif isinstance(item, (list, tuple)):
            if depth >= MAX_DEPTH:
                return JsonValueError(path, f"nested deeper than {MAX_DEPTH} levels")
            stack.extend((child, f"{path}[{index}]", depth + 1) for index, child in enumerate(item))
        else:
            why = _scalar_problem(item)
            if why is not None:
                return JsonValueError(path, why)
    return None


def _scalar_problem(item: Any) -> str | None:
    if isinstance(item, str):
        return "text that is not valid Unicode (a lone surrogate)" if _SURROGATE.search(item) else None
    if isinstance(item, bool) or item is None:
        return None
    if isinstance(item, int):
        return None if -MAX_INT <= item <= MAX_INT else \
            f"integer out of range (at most ±{MAX_INT}; send larger numbers as text)"
    if isinstance(item, float):
        if math.isnan(item):
            return "NaN is not a JSON number"
        return None if math.isfinite(item) else "number too large (beyond ±1.8e308)"
    if isinstance(item, _Constant):
        return f"{item.name} is not a JSON number"
    return None


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: no UTF-8 encoder, no database and few clients take it."""
    return _SURROGATE.search(text) is not None


def _shown(key: Any) -> str:
    text = key if isinstance(key, str) else str(key)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= _MAX_SHOWN_KEY else text[:_MAX_SHOWN_KEY] + "..."


def readable(value: Any) -> Any:
    """``value`` with every part outside the limits replaced by an ``UNREADABLE`` marker (a copy;
    ``value`` itself is left alone). For rows and task data already holding such values."""
    if problem(value, "") is None:
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    while stack:
        item, parent, slot, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)) and depth >= MAX_DEPTH:
            parent[slot] = UNREADABLE.format(f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(item, dict):
            copy: dict[str, Any] = {}
            parent[slot] = copy
            for key, child in item.items():
                key = _SURROGATE.sub("\ufffd", key) if isinstance(key, str) else key
                copy[key] = None
                stack.append((child, copy, key, depth + 1))
        elif isinstance(item, (list, tuple)):
            items: list[Any] = [None] * len(item)
            parent[slot] = items
            stack.extend((child, items, index, depth + 1) for index, child in enumerate(item))
        else:
            why = _scalar_problem(item)
            parent[slot] = item if why is None else UNREADABLE.format(why)
    return root[0]


def _stored_constant(name: str) -> str:
    return UNREADABLE.format(f"{name} is not a JSON number")


_DOOR_DECODER = json.JSONDecoder(parse_constant=_Constant).decode
_STORED_DECODER = json.JSONDecoder(parse_constant=_stored_constant).decode
_STORED_ENCODER = json.JSONEncoder(allow_nan=False).encode


def read_stored(text: str | bytes) -> Any:
    """The database engine's JSON deserializer: a row written before the limits still reads
    (``Infinity`` and too-deep parts become markers) instead of failing the query it is in."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    try:
        return _STORED_DECODER(text)
    except RecursionError:
        return readable(_STORED_DECODER(cut_deep(text)))


def write_stored(value: Any) -> str:
    """The database engine's JSON serializer: never writes ``NaN`` or ``Infinity`` (PostgreSQL
    refuses them and every other reader chokes on them): ValueError instead."""
    return _STORED_ENCODER(value)


def cut_deep(text: str | bytes) -> str:
    """JSON text with every object or array nested deeper than ``MAX_DEPTH`` replaced by a marker
    string, scanning the text itself (the parser cannot take it whole)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    marker = json.dumps(UNREADABLE.format(f"nested deeper than {MAX_DEPTH} levels"))
    out: list[str] = []
    depth, skip_from, in_string, escaped, start = 0, None, False, False, 0
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH and skip_from is None:
                out.append(text[start:index])
                out.append(marker)
                skip_from = depth
        elif char in "]}":
            if skip_from is not None and depth == skip_from:
                skip_from = None
                start = index + 1
            depth -= 1
    if skip_from is None:
        out.append(text[start:])
    return "".join(out)
