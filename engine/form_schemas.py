"""A task's result checked against its Camunda Form (form-js JSON, ``bpmn.camunda_forms``), on the
server, so that a caller other than the console cannot store what the form would refuse.

Checked, where the schema says so: ``validate.required``, the value's type per component
(``textfield``/``textarea`` text, ``number`` a number, ``checkbox`` true or false, ``checklist``
and ``taglist`` lists, ``datetime`` ISO 8601 text of its subtype), the options of ``select``,
``radio``, ``checklist`` and ``taglist`` (static ``values``, or the list in the variable
``valuesKey`` names), ``min``/``max``, ``minLength``/``maxLength`` and ``pattern`` (found anywhere
in the text, as form-js tests it) and ``validationType`` email. Keys the form does not have are
refused; a field left out takes its ``defaultValue``. What the server cannot know is not checked: a
field with a ``conditional`` (a FEEL expression may hide it) is never required, and options from a
``valuesExpression`` are not checked. Errors are ``invalid_params`` naming the field's key.
"""
from __future__ import annotations

import re
from datetime import date, datetime, time
from typing import Any

from bpmn.camunda_forms import OPTION_TYPES, input_fields
from engine.errors import InvalidParamsError

DECISION = "decision"
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _invalid(field: str, message: str) -> InvalidParamsError:
    return InvalidParamsError(message, data={"field": field})


def check_result(schema: dict, result: dict[str, Any], variables: dict[str, Any], *,
                 decision: bool = False) -> dict[str, Any]:
    """The result to store (defaults filled in); InvalidParamsError naming the first field it breaks."""
    checked = dict(result)
    known_roots = {DECISION} if decision else set()
    for path, component in input_fields(schema):
        known_roots.add(path[0])
        if "*" in path:
            continue  # inside a dynamic list: checked with the list
        _check_field(checked, path, component, variables)
    unknown = sorted(set(checked) - known_roots)
    if unknown:
        raise _invalid(unknown[0], f"Unknown form field '{unknown[0]}'; the form has: {', '.join(sorted(known_roots))}.")
    return checked


def _check_field(data: dict, path: tuple, component: dict, variables: dict) -> None:
    name = ".".join(path)
    holder = data
    for part in path[:-1]:
        inner = holder.get(part)
        if inner is None and component.get("defaultValue") is not None:
            inner = holder[part] = {}
        if inner is None:
            holder = None
            break
        if not isinstance(inner, dict):
            raise _invalid(name, f"Field '{part}' must be an object holding '{name}'.")
        holder = inner
    value = holder.get(path[-1]) if holder is not None else None
    if value is None and holder is not None and component.get("defaultValue") is not None:
        holder[path[-1]] = value = component["defaultValue"]
    validate = component.get("validate") or {}
    if _is_empty(component, value):
        if validate.get("required") and not component.get("conditional"):
            raise _invalid(name, f"Field '{name}' is required.")
        return
    if component["type"] == "dynamiclist":
        _check_list(name, value, component, variables)
        return
    _check_type(name, component, value)
    _check_limits(name, component, validate, value)
    if component["type"] in OPTION_TYPES:
        _check_options(name, component, value, variables)


def _is_empty(component: dict, value: Any) -> bool:
    if value is None or value == "" or value == []:
        return True
    return component["type"] == "checkbox" and value is False and bool((component.get("validate") or {}).get("required"))


def _check_list(name: str, value: Any, component: dict, variables: dict) -> None:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise _invalid(name, f"Field '{name}' must be a list of objects.")
    for index, item in enumerate(value):
        for path, child in input_fields(component):
            if "*" not in path:
                try:
                    _check_field(item, path, child, variables)
                except InvalidParamsError as exc:
                    field = f"{name}[{index}].{'.'.join(path)}"
                    raise _invalid(field, exc.message.replace(f"'{'.'.join(path)}'", f"'{field}'", 1)) from None


def _check_type(name: str, component: dict, value: Any) -> None:
    kind = component["type"]
    if kind in ("textfield", "textarea") and not isinstance(value, str):
        raise _invalid(name, f"Field '{name}' must be text.")
    if kind == "number":
        if isinstance(value, str) and component.get("serializeToString"):
            try:
                float(value)
                return
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _invalid(name, f"Field '{name}' must be a number.")
    if kind == "checkbox" and not isinstance(value, bool):
        raise _invalid(name, f"Field '{name}' must be true or false.")
    if kind in ("checklist", "taglist") and not isinstance(value, list):
        raise _invalid(name, f"Field '{name}' must be a list.")
    if kind == "datetime" and not _is_datetime(component.get("subtype") or "date", value):
        example = {"date": "2026-11-22", "time": "14:30", "datetime": "2026-11-22T14:30:00Z"}.get(
            component.get("subtype") or "date", "2026-11-22")
        raise _invalid(name, f"Field '{name}' must be an ISO 8601 {component.get('subtype') or 'date'} such as {example}.")


def _is_datetime(subtype: str, value: Any) -> bool:
    if not isinstance(value, str):
        return False
    text = value.strip().replace("Z", "+00:00")
    parse = {"date": date.fromisoformat, "time": time.fromisoformat}.get(subtype, datetime.fromisoformat)
    try:
        parse(text)
    except ValueError:
        return False
    return subtype != "datetime" or "T" in text or " " in text


def _check_limits(name: str, component: dict, validate: dict, value: Any) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if validate.get("min") is not None and value < validate["min"]:
            raise _invalid(name, f"Field '{name}' must be at least {validate['min']}.")
        if validate.get("max") is not None and value > validate["max"]:
            raise _invalid(name, f"Field '{name}' must be at most {validate['max']}.")
    if isinstance(value, str) and component["type"] in ("textfield", "textarea"):
        if validate.get("minLength") is not None and len(value) < validate["minLength"]:
            raise _invalid(name, f"Field '{name}' must be at least {validate['minLength']} characters long.")
        if validate.get("maxLength") is not None and len(value) > validate["maxLength"]:
            raise _invalid(name, f"Field '{name}' must be at most {validate['maxLength']} characters long.")
        if validate.get("pattern") and re.search(validate["pattern"], value) is None:
            raise _invalid(name, f"Field '{name}' must match the pattern {validate['pattern']}.")
        if validate.get("validationType") == "email" and not _EMAIL.match(value):
            raise _invalid(name, f"Field '{name}' must be an email address.")


def _check_options(name: str, component: dict, value: Any, variables: dict) -> None:
    if isinstance(component.get("values"), list):
        options = component["values"]
    elif isinstance(component.get("valuesKey"), str) and isinstance(variables.get(component["valuesKey"]), list):
        options = variables[component["valuesKey"]]
    else:
        return  # options computed by a FEEL expression, or not given: not checked
    allowed = [option.get("value") if isinstance(option, dict) else option for option in options]
    chosen = value if isinstance(value, list) else [value]
    for item in chosen:
        if item not in allowed:
            shown = ", ".join(map(str, allowed[:20]))
            raise _invalid(name, f"Field '{name}' must be one of: {shown}.")
