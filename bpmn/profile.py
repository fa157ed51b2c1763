"""Baton's BPMN profile: the extension properties, forms and buttons a model carries.

Configuration is read from both modelers people use: Camunda Modeler's
``camunda:properties/camunda:property`` and SpiffArena's ``spiffworkflow:properties/...``. These
functions only read; ``bpmn.rules`` decides what is valid, ``bpmn.parser`` stores the result in
``task_spec.extensions`` (plain dicts and lists, so SpiffWorkflow serializes them unaided).
"""
from __future__ import annotations

import json
import re
from typing import Any

from lxml import etree

BPMN_NS = "http://www.omg.org/spec/BPMN/20100524/MODEL"
CAMUNDA_NS = "http://camunda.org/schema/1.0/bpmn"
SPIFF_NS = "http://spiffworkflow.org/bpmn/schema/1.0/core"
ZEEBE_NS = "http://camunda.org/schema/zeebe/1.0"  # Camunda 8
NSMAP = {"bpmn": BPMN_NS, "camunda": CAMUNDA_NS, "spiffworkflow": SPIFF_NS}

# Plain strings evaluated per call (compiled etree.XPath objects are not meant to be shared
# between threads). A union is in document order: when a model names a property twice, the
# last one wins.
_PROPERTY_XPATH = ("./bpmn:extensionElements/camunda:properties/camunda:property"
                   " | ./bpmn:extensionElements/spiffworkflow:properties/spiffworkflow:property")
_FORM_FIELD_XPATH = "./bpmn:extensionElements/camunda:formData/camunda:formField"
_ENUM_VALUE_XPATH = "./camunda:value"
_CONSTRAINT_XPATH = "./camunda:validation/camunda:constraint"


def property_elements(node: etree._Element) -> list[etree._Element]:
    """The property elements of a BPMN element, from either vocabulary."""
    return node.xpath(_PROPERTY_XPATH, namespaces=NSMAP)


def read_properties(node: etree._Element) -> dict[str, str]:
    """``{name: value}``; a property without a name is skipped (validation reports it)."""
    properties: dict[str, str] = {}
    for prop in property_elements(node):
        name = prop.get("name")
        if name:
            properties[name] = prop.get("value", "")
    return properties


def split_list(raw: str | None) -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]``; the format of ``buttons`` and ``output_keys``."""
    if raw is None:
        return []
    return [item.strip() for item in raw.split(",")]


def read_buttons(properties: dict[str, str]) -> list[str]:
    return [item for item in split_list(properties.get("buttons")) if item]


def read_message_buttons(properties: dict[str, str]) -> list[dict[str, str]]:
    """A send_message task's ``buttons``: ``id:Title, id2:Title 2`` (id before the first colon), or
    just ``Title`` (its own id); blank entries are kept as blank so that deploy can refuse them."""
    buttons = []
    for item in split_list(properties.get("buttons")):
        button_id, colon, title = item.partition(":")
        buttons.append({"id": button_id.strip(), "title": title.strip()} if colon else {"id": item, "title": item})
    return buttons


def form_field_elements(node: etree._Element) -> list[etree._Element]:
    return node.xpath(_FORM_FIELD_XPATH, namespaces=NSMAP)


def read_form(node: etree._Element) -> list[dict[str, Any]]:
    """Camunda form fields as ``task.list`` shows them: ``{id, label, type, required, options?, default?}``.

    Defaults are typed for ``long`` and ``boolean`` fields (the modeler writes every value as text),
    so the default a form shows is the value the task takes when the field is left out.
    """
    return [read_form_field(field) for field in form_field_elements(node)]


def read_form_field(field: etree._Element) -> dict[str, Any]:
    field_id = field.get("id") or ""
    entry: dict[str, Any] = {
        "id": field_id,
        "label": field.get("label") or field_id,
        "type": field.get("type") or "string",
        "required": _is_required(field),
    }
    values = field.xpath(_ENUM_VALUE_XPATH, namespaces=NSMAP)
    if entry["type"] == "enum" or values:
        entry["options"] = [{"id": value.get("id") or "", "name": value.get("name") or value.get("id") or ""}
                            for value in values]
    if field.get("defaultValue") is not None:
        entry["default"] = typed_default(entry["type"], field.get("defaultValue"))
    return entry


def typed_default(field_type: str, raw: str) -> Any:
    kind = field_type.lower()
    if kind in ("long", "integer") and raw.strip().lstrip("-").isdigit():
        return int(raw)
    if kind == "boolean" and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    return raw


def _is_required(field: etree._Element) -> bool:
    for constraint in field.xpath(_CONSTRAINT_XPATH, namespaces=NSMAP):
        if constraint.get("name") == "required":
            # Camunda writes no config for "required"; an explicit "false" means not required.
            return (constraint.get("config") or "true").strip().lower() != "false"
    return False


# A WhatsApp message template (sent instead of the text when the 24-hour window is closed): Meta's
# template names are lowercase letters, digits and underscores; languages are codes such as en or en_US.
TEMPLATE_NAME = re.compile(r"[a-z0-9_]{1,512}")
TEMPLATE_LANGUAGE = re.compile(r"[a-z]{2,3}(_[A-Za-z]{2,4})?")
DEFAULT_TEMPLATE_LANGUAGE = "en_US"
MAX_TEMPLATE_PARAMS = 50
MAX_TEMPLATE_PARAM = 1024


def template_problem(name: Any, language: Any, params: Any) -> tuple[str, str] | None:
    """(the property or param at fault, what is wrong) with a template, or None when it is fine:
    ``name`` a template name, ``language`` a language code, ``params`` a list of strings."""
    if not isinstance(name, str) or not TEMPLATE_NAME.fullmatch(name):
        return "template", (f"template {json.dumps(name)[:80]} must be the template's name in WhatsApp Manager: "
                            "1 to 512 lowercase letters, digits or underscores.")
    if not isinstance(language, str) or not TEMPLATE_LANGUAGE.fullmatch(language):
        return "template_language", (f"template_language {json.dumps(language)[:40]} must be a language code "
                                     "such as en or en_US.")
    if not isinstance(params, list):
        return "template_params", "template_params must be a list of strings."
    if len(params) > MAX_TEMPLATE_PARAMS:
        return "template_params", f"template_params may hold at most {MAX_TEMPLATE_PARAMS} values, not {len(params)}."
    for number, value in enumerate(params, start=1):
        if not isinstance(value, str):
            return "template_params", (f"template_params value {number} is {type(value).__name__} "
                                       f"{json.dumps(value)[:40]}; every value must be a string.")
        if not value.strip() or len(value) > MAX_TEMPLATE_PARAM:
            return "template_params", (f"template_params value {number} must be a non-empty string of at most "
                                       f"{MAX_TEMPLATE_PARAM} characters.")
    return None


def read_message_template(properties: dict[str, str]) -> dict[str, Any] | None:
    """A send_message task's template: ``template`` (its name), ``template_language`` (default
    en_US), ``template_params`` (a JSON list of strings, each a template like ``text``); None without
    ``template``. Unchecked: a ``template_params`` that is not JSON is kept as it is (deploy refuses it)."""
    name = properties.get("template")
    if name is None:
        return None
    raw = properties.get("template_params")
    try:
        params = [] if raw is None or not raw.strip() else json.loads(raw)
    except ValueError:
        params = raw
    return {"name": name.strip(), "language": (properties.get("template_language") or DEFAULT_TEMPLATE_LANGUAGE).strip(),
            "params": params}
