"""Checking a human task's result against its form and buttons (the rules of ``task.complete``).

Types follow Camunda's form field types: ``string``, ``long``, ``boolean``, ``date`` (ISO 8601),
``enum`` (one of the option ids); any other type is taken as free JSON. A task with a form accepts
only its field ids and ``decision``; a task without a form accepts any object.
"""
from __future__ import annotations

from datetime import date, datetime
from typing import Any

from engine.errors import InvalidParamsError

DECISION = "decision"


def _invalid(field: str, message: str) -> InvalidParamsError:
    return InvalidParamsError(message, data={"field": field})


def _check_type(field: dict[str, Any], value: Any) -> None:
    field_id, kind = field["id"], (field.get("type") or "string").lower()
    if kind == "string" and not isinstance(value, str):
        raise _invalid(field_id, f"Field '{field_id}' must be a string.")
    if kind in ("long", "integer") and type(value) is not int:
        raise _invalid(field_id, f"Field '{field_id}' must be an integer.")
    if kind == "boolean" and not isinstance(value, bool):
        raise _invalid(field_id, f"Field '{field_id}' must be true or false.")
    if kind == "date" and not _is_iso_date(value):
        raise _invalid(field_id, f"Field '{field_id}' must be an ISO 8601 date such as 2026-11-22.")
    if kind == "enum":
        options = [option["id"] for option in field.get("options") or []]
        if value not in options:
            raise _invalid(field_id, f"Field '{field_id}' must be one of: {', '.join(map(str, options))}.")


def _is_iso_date(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    for parse in (date.fromisoformat, datetime.fromisoformat):
        try:
            parse(value.replace("Z", "+00:00"))
            return True
        except ValueError:
            continue
    return False


def validate_result(form: list[dict[str, Any]], buttons: list[str], result: dict[str, Any]) -> dict[str, Any]:
    """The result to store, with form defaults filled in; InvalidParamsError naming the field."""
    checked = dict(result)
    if buttons:
        decision = checked.get(DECISION)
        if decision is None:
            raise _invalid(DECISION, f"Field 'decision' is required: one of {', '.join(buttons)}.")
        if decision not in buttons:
            raise _invalid(DECISION, f"Field 'decision' must be one of: {', '.join(buttons)}.")
    if not form:
        return checked
    known = {field["id"] for field in form} | ({DECISION} if buttons else set())
    unknown = sorted(set(checked) - known)
    if unknown:
        raise _invalid(unknown[0], f"Unknown form field '{unknown[0]}'; the form has: {', '.join(sorted(known))}.")
    for field in form:
        field_id = field["id"]
        if checked.get(field_id) is None:
            if field.get("default") is not None:
                checked[field_id] = field["default"]
                continue
            if field.get("required"):
                raise _invalid(field_id, f"Field '{field_id}' is required.")
            checked.pop(field_id, None)
            continue
        _check_type(field, checked[field_id])
    return checked
