"""Element types: every BPMN element of a process is in ``bpmn.allowlist`` or refused."""
from __future__ import annotations

from collections.abc import Iterator

from lxml import etree

from bpmn.allowlist import (DECORATION, FLOW_ELEMENTS, ROOT_DECLARATIONS, child_refusal,
                            element_refusal)
from bpmn.issues import Issues, local_name
from bpmn.profile import BPMN_NS


def bpmn_children(element: etree._Element) -> Iterator[etree._Element]:
    """Direct children in the BPMN model namespace (diagram and vendor elements never execute)."""
    for child in element:
        if isinstance(child.tag, str) and etree.QName(child).namespace == BPMN_NS:
            yield child


def event_definitions(element: etree._Element) -> list[str]:
    return [local_name(child) for child in bpmn_children(element)
            if local_name(child).endswith("EventDefinition") or local_name(child) == "eventDefinitionRef"]


def flow_nodes(process: etree._Element) -> dict[str, etree._Element]:
    """Elements of the process a sequence flow may connect, by id (refused ones included)."""
    return {child.get("id"): child for child in bpmn_children(process)
            if child.get("id") and local_name(child) not in DECORATION
            and local_name(child) != "sequenceFlow"}


def check_definitions(root: etree._Element, issues: Issues) -> None:
    """Children of <definitions> other than processes: declarations pass, the rest is refused."""
    for child in bpmn_children(root):
        tag = local_name(child)
        if tag != "process" and tag not in ROOT_DECLARATIONS:
            issues.add(child, element_refusal(tag, []))


def check_elements(process: etree._Element, issues: Issues) -> None:
    for child in bpmn_children(process):
        tag = local_name(child)
        if tag in DECORATION:
            continue
        if tag in FLOW_ELEMENTS:
            _check_flow_element(child, tag, issues)
        else:
            # Refused as a whole: its insides (a subprocess's tasks, ...) are not looked at.
            issues.add(child, element_refusal(tag, event_definitions(child)))


def _check_flow_element(element: etree._Element, tag: str, issues: Issues) -> None:
    if not element.get("id"):
        issues.add(element, f"{tag} has no id.")
    allowed = FLOW_ELEMENTS[tag]
    for child in bpmn_children(element):
        child_tag = local_name(child)
        if child_tag not in allowed and child_tag not in DECORATION:
            issues.add(element, child_refusal(tag, child_tag), at=child)
    if element.get("isForCompensation") == "true":
        issues.add(element, child_refusal(tag, "isForCompensation"))
