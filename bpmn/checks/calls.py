"""Call activities: ``calledElement`` names another definition of the tenant by its code.

A process of the same file is called inside the caller's definition (its spec travels with the
caller's); any other name is the code of another definition, which the engine resolves (latest
version) when it loads the caller. Every variable goes in, and the called process's variables come
back (SpiffWorkflow 3.2); Camunda's variable mappings would say otherwise, so they are refused.
"""
from __future__ import annotations

from lxml import etree

from bpmn.checks.elements import bpmn_children, content
from bpmn.checks.process import called_element, called_in_file
from bpmn.issues import Issues, local_name
from bpmn.profile import CAMUNDA_NS, NSMAP

_MAPPINGS = "./bpmn:extensionElements/camunda:in | ./bpmn:extensionElements/camunda:out"


def called_elements(process: etree._Element) -> list[str]:
    """Codes of other definitions the process calls: calledElement values of every callActivity of the
    process, its subprocesses and the processes of its file that it calls, once each; processes of
    the file are not among them (they travel in the caller's specs)."""
    root = process.getroottree().getroot()
    own = {child.get("id") for child in bpmn_children(root) if local_name(child) == "process"}
    found = []
    for caller in (process, *called_in_file(process)):
        found += [called_element(el) for el in caller.iter(f"{{{NSMAP['bpmn']}}}callActivity")]
    return list(dict.fromkeys(name for name in found if name and name not in own))


def check_calls(container: etree._Element, issues: Issues) -> None:
    process = container
    while local_name(process) != "process" and process.getparent() is not None:
        process = process.getparent()
    for element in content(container):
        if local_name(element) == "callActivity":
            _check_call(element, process.get("id"), issues)


def _check_call(element, process_id: str | None, issues: Issues) -> None:
    called = called_element(element)
    if not called:
        issues.add(element, "callActivity needs a calledElement: the code of the definition it calls.")
    elif called == process_id:
        issues.add(element, f"callActivity calls '{called}', the process itself; a process cannot call itself.")
    binding = element.get(f"{{{CAMUNDA_NS}}}calledElementBinding")
    if binding not in (None, "latest"):
        issues.add(element, f"callActivity calledElementBinding '{binding}' is not supported; Baton calls "
                            "the latest version of the code.")
    for mapping in element.xpath(_MAPPINGS, namespaces=NSMAP):
        if not _passes_anyway(mapping):
            issues.add(element, f"callActivity with camunda:{etree.QName(mapping).localname} variable mappings "
                                "is not supported yet; every variable is passed in and the called "
                                "process's variables come back.", at=mapping)


def _passes_anyway(mapping) -> bool:
    """A mapping that asks for no more than Baton does: all variables, one variable under its own
    name (every variable goes in and comes back anyway), or a business key (Baton has none)."""
    if mapping.get("variables") == "all" or mapping.get("businessKey") is not None:
        return True
    source, target = mapping.get("source"), mapping.get("target")
    return source is not None and source == target and mapping.get("local") != "true"
