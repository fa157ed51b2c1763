"""Call activities: ``calledElement`` names another definition of the tenant by its code.

The called process is not in this file: the engine resolves the code (latest version) when it
deploys and loads the caller. Every variable goes in, and the called process's variables come
back (SpiffWorkflow 3.2); Camunda's variable mappings would say otherwise, so they are refused.
"""
from __future__ import annotations

from lxml import etree

from bpmn.checks.elements import bpmn_children, content
from bpmn.issues import Issues, local_name
from bpmn.profile import CAMUNDA_NS, NSMAP

_MAPPINGS = "./bpmn:extensionElements/camunda:in | ./bpmn:extensionElements/camunda:out"


def called_elements(process: etree._Element) -> list[str]:
    """calledElement values of every callActivity of the process, subprocesses included, once each."""
    found = [el.get("calledElement", "").strip() for el in process.iter(f"{{{NSMAP['bpmn']}}}callActivity")]
    return list(dict.fromkeys(name for name in found if name))


def check_calls(container: etree._Element, issues: Issues) -> None:
    root = container.getroottree().getroot()
    own = {child.get("id") for child in bpmn_children(root) if local_name(child) == "process"}
    process = container
    while local_name(process) != "process" and process.getparent() is not None:
        process = process.getparent()
    for element in content(container):
        if local_name(element) == "callActivity":
            _check_call(element, process.get("id"), own, issues)


def _check_call(element, process_id: str | None, own: set[str], issues: Issues) -> None:
    called = (element.get("calledElement") or "").strip()
    if not called:
        issues.add(element, "callActivity needs a calledElement: the code of the definition it calls.")
    elif called == process_id:
        issues.add(element, f"callActivity calls '{called}', the process itself; a process cannot call itself.")
    elif called in own:
        issues.add(element, f"callActivity calls '{called}', a process of this file; deploy that process "
                            "as a definition of its own and call it by its code.")
    binding = element.get(f"{{{CAMUNDA_NS}}}calledElementBinding")
    if binding not in (None, "latest"):
        issues.add(element, f"callActivity calledElementBinding '{binding}' is not supported; Baton calls "
                            "the latest version of the code.")
    for mapping in element.xpath(_MAPPINGS, namespaces=NSMAP):
        if mapping.get("variables") != "all":
            issues.add(element, f"callActivity with camunda:{etree.QName(mapping).localname} variable mappings "
                                "is not supported yet; every variable is passed in and the called "
                                "process's variables come back.", at=mapping)
