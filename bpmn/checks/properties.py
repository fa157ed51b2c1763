"""The profile's extension properties: triggers, operators, output keys, buttons and forms."""
from __future__ import annotations

from lxml import etree

from bpmn import profile
from bpmn import allowlist
from bpmn.allowlist import KNOWN_OPERATORS, TRIGGERS, UNDELIVERED
from bpmn.checks.elements import content
from bpmn.checks.operators import check_ai_chat, check_http, check_send_message
from bpmn.issues import Issues, local_name

_OPERATOR_LIST = ", ".join(KNOWN_OPERATORS[:-1]) + f" or {KNOWN_OPERATORS[-1]}"
_TRIGGER_LIST = ", ".join(list(TRIGGERS)[:-1]) + f" or {list(TRIGGERS)[-1]}"


def check_properties(container: etree._Element, issues: Issues) -> None:
    for element in content(container):
        tag = local_name(element)
        _check_property_elements(element, tag, issues)
        properties = profile.read_properties(element)
        check = _BY_TAG.get(tag)
        if check is not None:
            check(element, properties, issues)


def _check_property_elements(element, tag: str, issues: Issues) -> None:
    for prop in profile.property_elements(element):
        if not prop.get("name"):
            issues.add(element, f"{tag} has an extension property without a name.", at=prop)
        elif prop.get("value") is None and etree.QName(prop).namespace == profile.SPIFF_NS:
            # SpiffWorkflow's own reader fails on it; Camunda's modeler never writes one.
            issues.add(element, f"{tag} property '{prop.get('name')}' has no value.", at=prop)


def _check_start_event(element, properties: dict, issues: Issues) -> None:
    trigger = properties.get("trigger")
    if trigger is None or trigger == "":
        return
    if trigger not in TRIGGERS:
        issues.add(element, f"startEvent trigger '{trigger}' is unknown; use {_TRIGGER_LIST}.")
    elif TRIGGERS[trigger] and not (properties.get("channel") or "").strip():
        issues.add(element, f"startEvent with trigger '{trigger}' needs a 'channel' property "
                            "(the channel's config id or name).")


def _check_undelivered(element, properties: dict, issues: Issues) -> None:
    """What becomes of a thrown message that no instance waits for and no process starts with."""
    policy = properties.get("undelivered")
    if policy is not None and policy.strip() not in UNDELIVERED:
        issues.add(element, f"{local_name(element)} undelivered '{policy}' must be fail (the default: the "
                            "instance fails at this element) or drop (the message is dropped).")


def _check_end_event(element, properties: dict, issues: Issues) -> None:
    _check_undelivered(element, properties, issues)
    raw = properties.get("output_keys")
    if raw is None or not raw.strip():
        return  # no list: process.status returns every variable
    keys = profile.split_list(raw)
    if not all(key.isidentifier() for key in keys):
        issues.add(element, f"endEvent output_keys '{raw}' must be variable names separated by commas.")


def _check_service_task(element, properties: dict, issues: Issues) -> None:
    operator = properties.get("operator")
    if not operator:
        return  # an external task (bpmn.external); bpmn.checks.camunda checks its topic
    if operator not in KNOWN_OPERATORS:
        issues.add(element, f"serviceTask operator '{operator}' is unknown; use {_OPERATOR_LIST}.")
    elif operator not in allowlist.ENABLED_OPERATORS:  # read at call time: tests flip it
        issues.add(element, f"serviceTask with operator = {operator} is not supported yet.")
    elif operator == "http":
        check_http(element, properties, issues)
    elif operator == "send_message":
        check_send_message(element, properties, issues)
    elif operator == "ai_chat":
        check_ai_chat(element, properties, issues)


def _check_human_task(element, properties: dict, issues: Issues) -> None:
    tag = local_name(element)
    if "buttons" in properties:
        buttons = profile.split_list(properties["buttons"])
        if not all(buttons) or len(set(buttons)) != len(buttons):
            issues.add(element, f"{tag} buttons '{properties['buttons']}' must be distinct, non-empty "
                                "names separated by commas.")
    url = properties.get("crm_webhook")
    if url is not None and not url.strip().lower().startswith(("http://", "https://")):
        issues.add(element, f"{tag} crm_webhook '{url}' must be an http:// or https:// URL.")
    elif url is not None and len(url.strip()) > 2000:
        issues.add(element, f"{tag} crm_webhook must be at most 2000 characters long.")
    seen: set[str] = set()
    for field in profile.form_field_elements(element):
        field_id = field.get("id")
        if not field_id:
            issues.add(element, f"{tag} has a form field without an id.", at=field)
        elif field_id in seen:
            issues.add(element, f"{tag} has two form fields with the id '{field_id}'.", at=field)
        seen.add(field_id or "")
        entry = profile.read_form_field(field)
        if any(not option["id"] for option in entry.get("options", [])):
            issues.add(element, f"{tag} form field '{field_id}' has an option without an id.", at=field)


_BY_TAG = {
    "startEvent": _check_start_event,
    "endEvent": _check_end_event,
    "intermediateThrowEvent": _check_undelivered,
    "sendTask": _check_undelivered,
    "serviceTask": _check_service_task,
    "userTask": _check_human_task,
    "manualTask": _check_human_task,
}
