"""User code in a model: script bodies and gateway conditions must pass the sandbox's static check.

Deploying never runs anything: ``engine.sandbox`` only parses and inspects the code here, so a
syntax error or a forbidden construct (imports, dunders) is refused at deploy instead of failing
instances later. The code checked is exactly what ``bpmn.parser`` hands to SpiffWorkflow.
"""
from __future__ import annotations

import re

from lxml import etree

from bpmn.allowlist import EXPRESSION_LANGUAGES, SCRIPT_FORMATS
from bpmn.checks.elements import bpmn_children, content
from bpmn.checks.flows import condition_of
from bpmn.expressions import translate
from bpmn.issues import Issues, local_name
from bpmn.parser import clean_condition, clean_script
from bpmn.profile import NSMAP
from engine.sandbox import check_expression, check_script

_SCRIPT_LINE = re.compile(r"\(line (\d+)\)\s*$")
# SpiffArena's pre- and post-scripts run through the same script engine as script tasks.
_SPIFF_SCRIPTS = ("./bpmn:extensionElements/spiffworkflow:preScript"
                  " | ./bpmn:extensionElements/spiffworkflow:postScript")
_CONDITIONS = "./bpmn:conditionalEventDefinition"


def check_code(container: etree._Element, issues: Issues) -> None:
    for element in content(container):
        tag = local_name(element)
        if tag == "scriptTask":
            _check_script_task(element, issues)
        elif tag == "sequenceFlow":
            condition = condition_of(element)
            if condition is not None:
                _check_condition(element, condition, issues)
        for script in element.xpath(_SPIFF_SCRIPTS, namespaces=NSMAP):
            _check_script_text(element, script, f"{tag} {etree.QName(script).localname}", issues)
        for definition in element.xpath(_CONDITIONS, namespaces=NSMAP):
            condition = next((c for c in bpmn_children(definition) if local_name(c) == "condition"), None)
            if condition is None:
                issues.add(element, f"{tag} conditionalEventDefinition needs a condition: the expression it "
                                    "waits to become true.", at=definition)
            else:
                check_python_expression(element, condition, "condition", issues)


def _check_script_task(task: etree._Element, issues: Issues) -> None:
    script_format = (task.get("scriptFormat") or "python").strip().lower()
    if script_format not in SCRIPT_FORMATS:
        issues.add(task, f"scriptTask scriptFormat '{task.get('scriptFormat')}' is not supported; scripts are "
                         "Python: rewrite it in Python (Baton runs it in its sandbox), or make the element a "
                         "serviceTask that an external worker completes.")
        return
    scripts = [child for child in bpmn_children(task) if local_name(child) == "script"]
    if not scripts or clean_script(scripts[0].text) is None:
        issues.add(task, "scriptTask has no script.")
        return
    _check_script_text(task, scripts[0], "scriptTask script", issues)


def _check_script_text(owner: etree._Element, script: etree._Element, what: str, issues: Issues) -> None:
    source = clean_script(script.text)
    if source is None:
        return
    reason = check_script(source)
    if reason is None:
        return
    issues.add_raw(owner.get("id"), _file_line(script, reason), f"{what} cannot run: {_sentence(reason)}")


def _file_line(script: etree._Element, reason: str) -> int | None:
    """The file line of the script line the sandbox names, else the script element's line."""
    match = _SCRIPT_LINE.search(reason)
    if match is None or script.sourceline is None:
        return script.sourceline
    text = script.text or ""
    skipped = len(text) - len(text.lstrip("\n"))  # clean_script drops these leading blank lines
    return script.sourceline + skipped + int(match.group(1)) - 1


def _check_condition(flow: etree._Element, condition: etree._Element, issues: Issues) -> None:
    if clean_condition(condition.text) is None:
        issues.add(flow, "sequenceFlow has an empty conditionExpression.", at=condition)
        return
    check_python_expression(flow, condition, "condition", issues)


def check_python_expression(owner: etree._Element, node: etree._Element, what: str, issues: Issues) -> None:
    """A Python expression written as the text of ``node`` (a condition, loop condition, ...)."""
    tag = local_name(owner)
    language = (node.get("language") or "python").strip().lower()
    if language not in EXPRESSION_LANGUAGES:
        issues.add(owner, f"{tag} {what} language '{node.get('language')}' is not supported; "
                          f"{what}s are Python expressions.", at=node)
        return
    source = clean_condition(node.text)
    if source is None:
        issues.add(owner, f"{tag} {what} is empty.", at=node)
        return
    # Camunda 7 writes JUEL (${...}), Camunda 8 FEEL (= ...): translated into Python at deploy.
    translation = translate(source)
    if translation.problem is not None:
        issues.add(owner, f"{tag} {what} '{_shorten(source)}' cannot be translated from {translation.dialect}: "
                          f"{translation.problem}; write it as a Python expression, such as amount > 100.", at=node)
        return
    reason = check_expression(translation.python)
    if reason is not None:
        issues.add(owner, f"{tag} {what} '{_shorten(source)}' cannot run: {_sentence(reason)}", at=node)


def _shorten(source: str, limit: int = 80) -> str:
    flat = " ".join(source.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def _sentence(reason: str) -> str:
    reason = reason.strip()
    return reason if reason.endswith(".") else f"{reason}."
