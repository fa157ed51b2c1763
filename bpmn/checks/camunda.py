"""Camunda 7 extensions that carry code or data flow Baton does not run: refused, saying what to do.

A Java delegate on a service or send task is not refused: the task becomes an external task whose
topic is the delegate's name (``bpmn.external``), so a worker can do that work. What has no worker
is refused: listeners (Java, script or expression code run on element events), Camunda Connect
connectors, input/output mappings, script resources, Java or expression implementations on message
throw events, and ``camunda:type="external"`` without a topic. A user task's assignment, due dates,
priority and Camunda Form are read by ``bpmn.assignment`` and ``bpmn.camunda_forms``; other Camunda
attributes (other form keys, async flags, history time to live, field injections) configure
Camunda's engine and are ignored.
"""
from __future__ import annotations

from lxml import etree

from bpmn.checks.elements import MAX_NAME, bpmn_children, content, event_definition, is_container
from bpmn.checks.events import is_external_task
from bpmn.external import topic_of
from bpmn.issues import Issues, local_name
from bpmn.profile import CAMUNDA_NS, ZEEBE_NS

_LISTENER_FIX = ("Baton runs no listener code; put the work in a scriptTask (Python) or in a serviceTask "
                 "that an external worker completes, before or after this element.")
_IMPLEMENTATIONS = ("class", "delegateExpression", "expression", "type")


def check_camunda(container: etree._Element, issues: Issues) -> None:
    elements = list(content(container))
    if not is_container(container):
        elements.insert(0, container)  # the process's own listeners
    for element in elements:
        tag = local_name(element)
        for extension in _camunda_extensions(element):
            _check_extension(element, tag, extension, issues)
        if tag == "serviceTask" or tag == "sendTask":
            _check_external(element, tag, issues)
        if is_external_task(element) and len(topic_of(element)["topic"]) > MAX_NAME:
            issues.add(element, f"{tag} topic '{topic_of(element)['topic'][:40]}...' is longer than {MAX_NAME} "
                                "characters; give it a shorter camunda:topic.")
        if tag == "scriptTask" and element.get(f"{{{CAMUNDA_NS}}}resource"):
            issues.add(element, f"scriptTask camunda:resource '{element.get(f'{{{CAMUNDA_NS}}}resource')}' is "
                                "not supported: write the script inline, in Python.")
        definition = event_definition(element)
        if definition is not None and local_name(definition) == "messageEventDefinition" \
                and tag in ("endEvent", "intermediateThrowEvent"):
            for attribute in _IMPLEMENTATIONS:
                if definition.get(f"{{{CAMUNDA_NS}}}{attribute}"):
                    issues.add(element, f"{tag} messageEventDefinition with camunda:{attribute} is not supported: "
                                        f"Baton throws the message itself (by its name, with the variables); "
                                        f"remove camunda:{attribute}.", at=definition)


def _camunda_extensions(element: etree._Element):
    for extensions in bpmn_children(element):
        if local_name(extensions) == "extensionElements":
            for child in extensions:
                if isinstance(child.tag, str) and etree.QName(child).namespace in (CAMUNDA_NS, ZEEBE_NS):
                    yield child


def _check_extension(element, tag: str, extension, issues: Issues) -> None:
    kind = local_name(extension)
    if kind in ("executionListener", "taskListener", "executionListeners", "taskListeners"):
        code = _code_of(extension)
        issues.add(element, f"{tag} with camunda:{kind} ({code}) is not supported: {_LISTENER_FIX}", at=extension)
    elif kind == "connector":
        connector = (extension.findtext(f"{{{CAMUNDA_NS}}}connectorId") or "").strip() or "a connector"
        issues.add(element, f"{tag} with camunda:connector ({connector}) is not supported: for an HTTP call give "
                            "it the properties operator = http, url, method, body and result_variable; "
                            "otherwise let an external worker do the work (camunda:type=\"external\").",
                   at=extension)
    elif kind == "ioMapping":  # Camunda 8
        issues.add(element, f"{tag} with zeebe:ioMapping (input/output mappings) is not supported yet: the element "
                            "sees every process variable and what it sets becomes a process variable; compute "
                            "values in a Python scriptTask before it.", at=extension)
    elif kind == "inputOutput":
        scripts = [s.get("scriptFormat") or "a" for s in extension.iter(f"{{{CAMUNDA_NS}}}script")]
        what = f" with a {scripts[0]} script" if scripts else ""
        issues.add(element, f"{tag} with camunda:inputOutput{what} is not supported yet: the element sees every "
                            "process variable and what it sets becomes a process variable; compute values "
                            "in a Python scriptTask before it.", at=extension)


def _code_of(listener) -> str:
    for attribute in ("class", "delegateExpression", "expression"):
        if listener.get(attribute):
            return f"{attribute} {listener.get(attribute)}"
    script = listener.find(f"{{{CAMUNDA_NS}}}script")
    if script is not None:
        language = (script.get("scriptFormat") or "").strip()
        return f"a {language} script" if language else "a script"
    return "code"


def _check_external(element, tag: str, issues: Issues) -> None:
    if element.get(f"{{{CAMUNDA_NS}}}type") == "external" and not (element.get(f"{{{CAMUNDA_NS}}}topic") or "").strip():
        issues.add(element, f'{tag} with camunda:type="external" needs a camunda:topic: the topic its '
                            "workers fetch.")
    elif element.get(f"{{{CAMUNDA_NS}}}type") not in (None, "external"):
        issues.add(element, f"{tag} camunda:type '{element.get(f'{{{CAMUNDA_NS}}}type')}' is not supported; "
                            'use camunda:type="external" with a camunda:topic.')
