"""Camunda 7 extensions that carry code or data flow Baton does not run: refused, saying what to do.

A Java delegate on a service or send task is not refused: the task becomes an external task whose
topic is the delegate's name (``bpmn.external``), so a worker can do that work. What has no worker
is refused: listeners (Java, script or expression code run on element events), Camunda Connect
connectors, input/output mappings but on script and service tasks (``bpmn.camunda_io``) and their
scripts in other languages than Python, script resources, and ``camunda:type="external"`` without
a topic. A message end or throw event whose definition names a Java or expression implementation
runs as an external task, as a service task does. A user task's assignment, due dates, priority
and Camunda Form are read by ``bpmn.assignment`` and ``bpmn.camunda_forms``; other Camunda
attributes (other form keys, async flags, history time to live, field injections) configure
Camunda's engine and are ignored.
"""
from __future__ import annotations

from lxml import etree

from bpmn.allowlist import SCRIPT_FORMATS
from bpmn.camunda_io import MAPPED, read_io_mapping
from bpmn.checks.elements import MAX_NAME, bpmn_children, content, is_container
from bpmn.checks.events import is_external_task
from bpmn.external import event_topic_of, message_implementation, topic_of
from bpmn.issues import Issues, local_name
from bpmn.profile import CAMUNDA_NS, ZEEBE_NS

_LISTENER_FIX = ("Baton runs no listener code; put the work in a scriptTask (Python) or in a serviceTask "
                 "that an external worker completes, before or after this element.")


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
        implementation = message_implementation(element)
        if implementation is not None:  # an external task: a worker does the sending
            _check_external(implementation, f"{tag} messageEventDefinition", issues, at=element)
            if len(event_topic_of(element)["topic"]) > MAX_NAME:
                issues.add(element, f"{tag} topic '{event_topic_of(element)['topic'][:40]}...' is longer than "
                                    f"{MAX_NAME} characters; give it a shorter camunda:topic.")


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
        scripts = [script for script in extension.iter(f"{{{CAMUNDA_NS}}}script")
                   if (script.get("scriptFormat") or "").strip().lower() not in SCRIPT_FORMATS]
        code = ""
        if scripts:  # what is code Baton does not run, besides the connector itself
            source = scripts[0].get("resource")
            code = (f", nor its {scripts[0].get('scriptFormat') or 'script'} script"
                    f"{f' ({source})' if source else ''}, code Baton does not run")
        issues.add(element, f"{tag} with camunda:connector ({connector}) is not supported{code}: for an HTTP call "
                            "give it the properties operator = http, url, method, body and result_variable; "
                            "otherwise let an external worker do the work (camunda:type=\"external\").",
                   at=extension)
    elif kind == "ioMapping":  # Camunda 8
        issues.add(element, f"{tag} with zeebe:ioMapping (input/output mappings) is not supported yet: the element "
                            "sees every process variable and what it sets becomes a process variable; compute "
                            "values in a Python scriptTask before it.", at=extension)
    elif kind == "inputOutput" and tag in MAPPED:
        for where, problem in read_io_mapping(extension).problems:
            issues.add(element, f"{tag} {problem.rstrip('.')}.", at=where)
    elif kind == "inputOutput":
        issues.add(element, f"{tag} with camunda:inputOutput is not supported yet: Baton maps inputs and outputs "
                            "of script and service tasks; here the element sees every process variable and what "
                            "it sets becomes a process variable; compute values in a Python scriptTask before it.",
                   at=extension)


def _code_of(listener) -> str:
    for attribute in ("class", "delegateExpression", "expression"):
        if listener.get(attribute):
            return f"{attribute} {listener.get(attribute)}"
    script = listener.find(f"{{{CAMUNDA_NS}}}script")
    if script is not None:
        language = (script.get("scriptFormat") or "").strip()
        return f"a {language} script" if language else "a script"
    return "code"


def _check_external(element, tag: str, issues: Issues, at=None) -> None:
    """``element`` carries the implementation; ``at``: the element refused, when another (an event
    whose message definition carries it)."""
    owner = element if at is None else at
    if element.get(f"{{{CAMUNDA_NS}}}type") == "external" and not (element.get(f"{{{CAMUNDA_NS}}}topic") or "").strip():
        issues.add(owner, f'{tag} with camunda:type="external" needs a camunda:topic: the topic its '
                          "workers fetch.", at=element)
    elif element.get(f"{{{CAMUNDA_NS}}}type") not in (None, "external"):
        issues.add(owner, f"{tag} camunda:type '{element.get(f'{{{CAMUNDA_NS}}}type')}' is not supported; "
                          'use camunda:type="external" with a camunda:topic.', at=element)
