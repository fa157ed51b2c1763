"""Element types: every BPMN element of a process is in ``bpmn.allowlist`` or refused.

Checks work per container: the process, and each subProcess inside it (at any depth), whose
children are checked exactly like a process's. ``containers`` walks them; a refused container
(adHocSubProcess) is refused as a whole and not walked into.
"""
from __future__ import annotations

from collections.abc import Iterator

from lxml import etree

from bpmn.allowlist import (BPMN_FLOW_CONTENT, CONTAINERS, DECORATION, FLOW_ELEMENTS, MULTIPLE_DEFINITIONS,
                            PROCESS_DECLARATIONS, ROOT_DECLARATIONS, child_refusal, element_refusal)
from bpmn.issues import Issues, local_name
from bpmn.profile import BPMN_NS


def bpmn_children(element: etree._Element) -> Iterator[etree._Element]:
    """Direct children in the BPMN model namespace (diagram and vendor elements never execute)."""
    for child in element:
        if isinstance(child.tag, str) and etree.QName(child).namespace == BPMN_NS:
            yield child


def child_named(element: etree._Element, tag: str) -> etree._Element | None:
    return next((child for child in bpmn_children(element) if local_name(child) == tag), None)


def event_definitions(element: etree._Element) -> list[str]:
    return [local_name(child) for child in bpmn_children(element)
            if local_name(child).endswith("EventDefinition") or local_name(child) == "eventDefinitionRef"]


def event_definition(element: etree._Element) -> etree._Element | None:
    """The one event definition of an event (None for a none event or several definitions)."""
    found = [child for child in bpmn_children(element) if local_name(child).endswith("EventDefinition")]
    return found[0] if len(found) == 1 else None


def is_container(element: etree._Element) -> bool:
    return local_name(element) in CONTAINERS


def is_event_subprocess(element: etree._Element) -> bool:
    return local_name(element) == "subProcess" and element.get("triggeredByEvent") == "true"


def containers(process: etree._Element) -> Iterator[etree._Element]:
    """The process, then every subProcess within it, depth first in document order."""
    yield process
    for child in bpmn_children(process):
        if is_container(child):
            yield from containers(child)


def container_word(container: etree._Element) -> str:
    """'process', 'subProcess', 'transaction' or 'event subProcess', for sentences."""
    if is_event_subprocess(container):
        return "event subProcess"
    return local_name(container) if is_container(container) else "process"


def content(container: etree._Element) -> Iterator[etree._Element]:
    """The flow content of a container (for a subProcess, not its own loop or documentation)."""
    nested = is_container(container)
    for child in bpmn_children(container):
        if not nested or local_name(child) in BPMN_FLOW_CONTENT:
            yield child


def flow_nodes(container: etree._Element) -> dict[str, etree._Element]:
    """Elements of the container a sequence flow may connect, by id (refused ones included)."""
    return {child.get("id"): child for child in content(container)
            if child.get("id") and local_name(child) not in DECORATION
            and local_name(child) != "sequenceFlow"}


MAX_NAME = 255  # a message or signal name, and an external task's topic (the engine's columns)


def check_definitions(root: etree._Element, issues: Issues) -> None:
    """Children of <definitions> other than processes: declarations pass, the rest is refused."""
    for child in bpmn_children(root):
        tag = local_name(child)
        if tag != "process" and tag not in ROOT_DECLARATIONS:
            issues.add(child, element_refusal(tag, []))
        elif tag in ("message", "signal") and len((child.get("name") or "").strip() or child.get("id") or "") > MAX_NAME:
            issues.add(child, f"The {tag} name is longer than {MAX_NAME} characters.")


def check_elements(container: etree._Element, issues: Issues) -> None:
    nested = is_container(container)
    for child in content(container):
        tag = local_name(child)
        if tag == "ioSpecification" and not nested:
            check_io_specification(container, child, issues)
        if tag in DECORATION or (not nested and tag in PROCESS_DECLARATIONS):
            continue
        if tag in FLOW_ELEMENTS:
            _check_flow_element(child, tag, issues)
        else:
            # Refused as a whole: its insides (a transaction's tasks, ...) are not looked at.
            issues.add(child, element_refusal(tag, event_definitions(child)))


def _check_flow_element(element: etree._Element, tag: str, issues: Issues) -> None:
    if not element.get("id"):
        issues.add(element, f"{tag} has no id.")
    allowed = FLOW_ELEMENTS[tag]
    nested = is_container(element)
    for child in bpmn_children(element):
        child_tag = local_name(child)
        if nested and child_tag in BPMN_FLOW_CONTENT:
            continue  # the subProcess's own content: checked in its own pass
        if child_tag not in allowed and child_tag not in DECORATION:
            issues.add(element, child_refusal(tag, child_tag), at=child)
        elif child_tag == "ioSpecification":
            check_io_specification(element, child, issues)
    if element.get("isForCompensation") == "true":
        issues.add(element, child_refusal(tag, "isForCompensation"))
    found = event_definitions(element)
    if len(found) > 1 and not is_multiple(element):
        names = " and ".join(found)
        issues.add(element, f"{tag} with {names} (a multiple event) is not supported: {_MULTIPLE_RULE}.")


_MULTIPLE_RULE = ("a start event of the process may combine message and signal definitions (a timer start is "
                  "a start event of its own), a catch or boundary event message, signal and timer definitions; "
                  "a throw event throws one thing (one event per thing to throw)")


def is_multiple(element: etree._Element) -> bool:
    """An event with several definitions Baton runs (allowlist.MULTIPLE_DEFINITIONS): a multiple or
    parallel multiple start event of the process, catch or boundary event."""
    found = event_definitions(element)
    tag = local_name(element)
    if len(found) < 2 or not set(found) <= MULTIPLE_DEFINITIONS.get(tag, frozenset()):
        return False
    return tag != "startEvent" or local_name(element.getparent()) == "process"


def check_io_specification(owner: etree._Element, spec: etree._Element, issues: Issues) -> None:
    """SpiffWorkflow reads each dataInput/dataOutput as the variable named by its id: the ids must be
    names a script or condition can use."""
    for data in spec.iter(f"{{{BPMN_NS}}}dataInput", f"{{{BPMN_NS}}}dataOutput"):
        data_id = data.get("id") or ""
        if not data_id.isidentifier() or data_id.startswith("__"):
            issues.add(owner, f"{local_name(owner)} ioSpecification {local_name(data)} '{data_id}' must have a "
                              "variable name as its id (SpiffWorkflow reads the variable of that name), such "
                              "as order_total.", at=data)
