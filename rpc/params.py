"""Checks for JSON-RPC named params: each returns the value or raises InvalidParamsError naming it.

``null`` counts as absent for the ``optional_*`` helpers. Integers are bounded by the database's
64-bit range, so an oversized id is ``invalid_params``, never a database overflow.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any

from engine.errors import InvalidParamsError

MAX_INT = 2**63 - 1
_MISSING = object()


def _fail(name: str, message: str) -> InvalidParamsError:
    return InvalidParamsError(message, data={"param": name})


def _get(params: dict[str, Any], name: str) -> Any:
    value = params.get(name, _MISSING)
    if value is _MISSING or value is None:
        raise _fail(name, f"Missing required parameter '{name}'.")
    return value


def _check_int(name: str, value: Any, minimum: int | None, maximum: int | None) -> int:
    # bool is a subclass of int in Python but not a JSON number; 3.0 is not an integer either.
    if type(value) is not int:
        raise _fail(name, f"Parameter '{name}' must be an integer.")
    if minimum is not None and value < minimum:
        raise _fail(name, f"Parameter '{name}' must be at least {minimum}.")
    maximum = MAX_INT if maximum is None else min(maximum, MAX_INT)
    if value > maximum:
        raise _fail(name, f"Parameter '{name}' must be at most {maximum}.")
    return value


def _check_str(name: str, value: Any, max_len: int | None, allow_empty: bool) -> str:
    if not isinstance(value, str):
        raise _fail(name, f"Parameter '{name}' must be a string.")
    if not value and not allow_empty:
        raise _fail(name, f"Parameter '{name}' must not be empty.")
    if max_len is not None and len(value) > max_len:
        raise _fail(name, f"Parameter '{name}' must be at most {max_len} characters long.")
    if "\x00" in value:
        raise _fail(name, f"Parameter '{name}' must not contain NUL characters.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape such as "\ud800"
        raise _fail(name, f"Parameter '{name}' must be valid Unicode text.") from None
    return value


def require_int(params: dict[str, Any], name: str, *, minimum: int | None = 1,
                maximum: int | None = None) -> int:
    """A required integer; by default an id (at least 1)."""
    return _check_int(name, _get(params, name), minimum, maximum)


def optional_int(params: dict[str, Any], name: str, default: int | None = None, *,
                 minimum: int | None = None, maximum: int | None = None) -> int | None:
    value = params.get(name)
    return default if value is None else _check_int(name, value, minimum, maximum)


def require_str(params: dict[str, Any], name: str, *, max_len: int | None = None,
                allow_empty: bool = False) -> str:
    return _check_str(name, _get(params, name), max_len, allow_empty)


def optional_str(params: dict[str, Any], name: str, default: str | None = None, *,
                 max_len: int | None = None, allow_empty: bool = False) -> str | None:
    value = params.get(name)
    return default if value is None else _check_str(name, value, max_len, allow_empty)


def require_dict(params: dict[str, Any], name: str) -> dict[str, Any]:
    value = _get(params, name)
    if not isinstance(value, dict):
        raise _fail(name, f"Parameter '{name}' must be an object.")
    return value


def optional_dict(params: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The object, or None when absent: ``optional_dict(params, "variables") or {}``."""
    return None if params.get(name) is None else require_dict(params, name)


def require_list(params: dict[str, Any], name: str) -> list[Any]:
    value = _get(params, name)
    if not isinstance(value, list):
        raise _fail(name, f"Parameter '{name}' must be an array.")
    return value


def optional_list(params: dict[str, Any], name: str) -> list[Any] | None:
    return None if params.get(name) is None else require_list(params, name)


def require_one_of(params: dict[str, Any], name: str, choices: Collection[str]) -> str:
    value = _get(params, name)
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(f"'{choice}'" for choice in choices)
        raise _fail(name, f"Parameter '{name}' must be one of {options}.")
    return value


def optional_one_of(params: dict[str, Any], name: str, choices: Collection[str],
                    default: str | None = None) -> str | None:
    return default if params.get(name) is None else require_one_of(params, name, choices)


def int_or_str(params: dict[str, Any], name: str, *, max_len: int = 200) -> int | str:
    """A required id or code: an integer (at least 1) or a non-empty string."""
    value = _get(params, name)
    if type(value) is int:
        return _check_int(name, value, 1, None)
    if isinstance(value, str):
        return _check_str(name, value, max_len, allow_empty=False)
    raise _fail(name, f"Parameter '{name}' must be an integer or a string.")


def reject_unknown(params: dict[str, Any], allowed: Collection[str]) -> None:
    """InvalidParamsError naming every param that is not in ``allowed``."""
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        names = ", ".join(f"'{name}'" for name in unknown)
        noun = "parameter" if len(unknown) == 1 else "parameters"
        raise InvalidParamsError(f"Unknown {noun} {names}.", data={"params": unknown})


def page_params(params: dict[str, Any], max_per_page: int = 100) -> tuple[int, int]:
    """``(page, per_page)``: defaults 1 and 20; ``per_page`` above ``max_per_page`` is refused."""
    # Bounded so that the row offset (page - 1) * per_page still fits the database's integers.
    page = optional_int(params, "page", 1, minimum=1, maximum=MAX_INT // max_per_page)
    per_page = optional_int(params, "per_page", min(20, max_per_page), minimum=1, maximum=max_per_page)
    return page, per_page


def optional_bool(params: dict[str, Any], name: str, default: bool = False) -> bool:
    """true or false; absent or null is ``default``."""
    value = params.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _fail(name, f"Parameter '{name}' must be true or false.")
    return value
