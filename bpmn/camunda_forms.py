"""Camunda Forms (the form-js JSON Camunda Modeler's form editor saves) given to a deploy, and the
form a user task names: ``camunda:formRef`` (binding ``deployment``, ``latest`` or ``version``),
``camunda:formKey="camunda-forms:deployment:<id>"``, or Camunda 8's ``zeebe:formDefinition formId``.

``read_forms`` checks that each file is a Camunda Form Baton can check results against (an object
with an ``id``, a ``components`` list; every input with a ``key``, no key twice, options as
``{label, value}``, numeric limits, patterns Python reads) and returns them by id; ``input_fields``
walks a schema's inputs with the path of their value in the submitted data (form-js nests values
under dotted keys, a group's ``path`` and a dynamic list's ``path``), for ``engine.form_schemas``.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from lxml import etree

from bpmn.profile import BPMN_NS, CAMUNDA_NS, ZEEBE_NS
from engine import json_values

MAX_FORMS = 20
# Components whose value is submitted, by form-js type; the others only show something.
INPUT_TYPES = ("textfield", "textarea", "number", "checkbox", "checklist", "radio", "select", "taglist",
               "datetime", "expression", "filepicker")
OPTION_TYPES = ("checklist", "radio", "select", "taglist")
CONTAINER_TYPES = ("group", "dynamiclist")
BINDINGS = ("deployment", "latest", "version")
FORM_KEY_PREFIX = "camunda-forms:deployment:"


def form_ref(node: etree._Element) -> dict[str, Any] | None:
    """The form a user task names: ``{"key", "binding", "version"?}``, or None."""
    ref = (node.get(f"{{{CAMUNDA_NS}}}formRef") or "").strip()
    if ref:
        binding = (node.get(f"{{{CAMUNDA_NS}}}formRefBinding") or "latest").strip()
        entry: dict[str, Any] = {"key": ref, "binding": binding}
        if binding == "version":
            entry["version"] = (node.get(f"{{{CAMUNDA_NS}}}formRefVersion") or "").strip()
        return entry
    key = (node.get(f"{{{CAMUNDA_NS}}}formKey") or "").strip()
    if key.startswith(FORM_KEY_PREFIX) and key[len(FORM_KEY_PREFIX):].strip():
        return {"key": key[len(FORM_KEY_PREFIX):].strip(), "binding": "deployment"}
    zeebe = node.find(f"{{{BPMN_NS}}}extensionElements/{{{ZEEBE_NS}}}formDefinition")
    if zeebe is not None and (zeebe.get("formId") or "").strip():
        binding = "deployment" if zeebe.get("bindingType") == "deployment" else "latest"
        return {"key": zeebe.get("formId").strip(), "binding": binding}
    return None


def form_ref_problem(ref: dict[str, Any], given: dict[str, dict], deployed: dict[str, set[int]]) -> str | None:
    """Why a task's form reference cannot be served (``given``: this deploy's forms by id;
    ``deployed``: the tenant's earlier forms, id -> versions), or None."""
    key, binding = ref["key"], ref["binding"]
    if binding not in BINDINGS:
        return (f"camunda:formRefBinding '{binding[:40]}' is not one of {', '.join(BINDINGS)}")
    if binding == "deployment" and key not in given:
        return (f"names the form '{key[:100]}', which is not among the forms of this deploy: give its "
                "JSON in definition.deploy's 'forms'")
    if binding == "latest" and key not in given and key not in deployed:
        return f"names the form '{key[:100]}', which was never deployed: give its JSON in definition.deploy's 'forms'"
    if binding == "version":
        version = ref.get("version") or ""
        if not version.isdigit():
            return "has camunda:formRefBinding 'version' but no whole-number camunda:formRefVersion"
        if int(version) not in deployed.get(key, set()) | ({max(deployed.get(key, {0})) + 1} if key in given else set()):
            return f"names version {version} of the form '{key[:100]}', which does not exist"
    return None


def read_forms(texts: list[str]) -> tuple[dict[str, dict], list[tuple[str | None, str]]]:
    """The forms by id, and the problems as ``(form id or None, sentence)`` naming ``forms[i]``."""
    forms: dict[str, dict] = {}
    problems: list[tuple[str | None, str]] = []
    for index, text in enumerate(texts[:MAX_FORMS]):
        where = f"forms[{index}]"
        try:
            schema = json_values.parse_checked(text, where)
        except (json_values.JsonSyntaxError, json_values.JsonValueError) as exc:
            problems.append((None, f"{where} is not JSON: {exc}"))
            continue
        form_id = schema.get("id") if isinstance(schema, dict) else None
        problem = schema_problem(schema)
        if problem:
            problems.append((form_id if isinstance(form_id, str) else None,
                             f"{where} is not a Camunda Form Baton can check: {problem}."))
        elif form_id in forms:
            problems.append((form_id, f"{where} has the id '{form_id}' of an earlier form of this deploy."))
        else:
            forms[form_id] = schema
    return forms, problems


def schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return "a form is a JSON object"
    if not isinstance(schema.get("id"), str) or not schema["id"].strip() or len(schema["id"]) > 255:
        return "it has no 'id' (1 to 255 characters), which camunda:formRef names"
    if schema.get("type", "default") != "default":
        return f"its 'type' is '{str(schema.get('type'))[:40]}', not 'default'"
    if not isinstance(schema.get("components"), list):
        return "it has no 'components' list"
    seen: set[tuple] = set()
    try:
        for path, component in input_fields(schema):
            if path in seen:
                return f"the key '{'.'.join(map(str, path))}' is used by two fields"
            seen.add(path)
            problem = _component_problem(component)
            if problem:
                return f"the field '{component.get('key')}' {problem}"
    except ValueError as exc:
        return str(exc)
    return None


def input_fields(schema: dict, prefix: tuple = ()) -> Iterator[tuple[tuple, dict]]:
    """``(path, component)`` of each input, the path being the keys to its value in the data
    (a dynamic list's children are walked with ``prefix + (list path, "*")``). ValueError on a
    component that is not an object or an input without a key."""
    for component in schema.get("components") or []:
        if not isinstance(component, dict) or not isinstance(component.get("type"), str):
            raise ValueError("every component is an object with a 'type'")
        kind = component["type"]
        if kind in CONTAINER_TYPES:
            path = _path(component.get("path"))
            if kind == "dynamiclist":
                if not path:
                    raise ValueError("a dynamic list needs a 'path'")
                yield prefix + path, component
                yield from input_fields(component, prefix + path + ("*",))
            else:
                yield from input_fields(component, prefix + path)
        elif kind in INPUT_TYPES:
            key = component.get("key")
            if not isinstance(key, str) or not key.strip():
                raise ValueError(f"a {kind} field has no 'key'")
            yield prefix + _path(key), component


def _path(text: Any) -> tuple:
    if not isinstance(text, str) or not text.strip():
        return ()
    return tuple(part for part in text.strip().split("."))


def _component_problem(component: dict) -> str | None:
    kind = component["type"]
    if kind in OPTION_TYPES and "values" in component:
        values = component["values"]
        if not isinstance(values, list) or not all(isinstance(v, dict) and "value" in v for v in values):
            return "has 'values' that are not a list of {label, value}"
    validate = component.get("validate") or {}
    if not isinstance(validate, dict):
        return "has a 'validate' that is not an object"
    for limit in ("min", "max", "minLength", "maxLength"):
        value = validate.get(limit)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"has validate.{limit} that is not a number"
    pattern = validate.get("pattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except (re.error, TypeError):
            return (f"has validate.pattern '{str(pattern)[:60]}', which the server cannot check "
                    "(write it as a plain regular expression)")
    return None
