"""Reading ``camunda:inputOutput`` at deploy: each parameter's value compiled into one sandbox
expression that ``bpmn.io_mapping`` evaluates at run time (validation and the parser read it alike).

A value is Camunda's: text (a ``${...}`` JUEL expression, translated, else the text itself),
``camunda:list`` of values, ``camunda:map`` of entries, or ``camunda:script`` in Python (its text is
the expression). A script in another language (JavaScript, Groovy), or one loaded from a resource,
is code Baton does not run: refused, saying so.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree

from bpmn.allowlist import SCRIPT_FORMATS
from bpmn.expressions import translate
from bpmn.profile import CAMUNDA_NS
from engine.sandbox import check_expression

# The elements whose specs apply a mapping (bpmn.io_mapping); elsewhere it stays refused.
MAPPED = ("scriptTask", "serviceTask")


@dataclass
class IoMappingReading:
    inputs: list[list[str]] = field(default_factory=list)   # [[name, python expression], ...]
    outputs: list[list[str]] = field(default_factory=list)
    problems: list[tuple[etree._Element, str]] = field(default_factory=list)  # (where, sentence)

    def as_extension(self) -> dict:
        return {"inputs": self.inputs, "outputs": self.outputs}


def io_mapping_of(node: etree._Element) -> etree._Element | None:
    return node.find(f"./{{http://www.omg.org/spec/BPMN/20100524/MODEL}}extensionElements/{{{CAMUNDA_NS}}}inputOutput")


def read_io_mapping(mapping: etree._Element) -> IoMappingReading:
    reading = IoMappingReading()
    for parameter in mapping:
        if not isinstance(parameter.tag, str):
            continue
        kind = etree.QName(parameter).localname
        name = (parameter.get("name") or "").strip()
        if kind not in ("inputParameter", "outputParameter"):
            reading.problems.append((parameter, f"camunda:inputOutput holds camunda:{kind}, which is neither an "
                                                "inputParameter nor an outputParameter."))
            continue
        if not name.isidentifier() or name.startswith("__"):
            reading.problems.append((parameter, f"camunda:{kind} name '{name}' must be a variable name, such as "
                                                "order_total."))
            continue
        python = _value(parameter, f"camunda:{kind} '{name}'", reading)
        if python is not None:
            (reading.inputs if kind == "inputParameter" else reading.outputs).append([name, python])
    return reading


def _value(node: etree._Element, what: str, reading: IoMappingReading) -> str | None:
    """The sandbox expression of a parameter's (or list value's, map entry's) content; None with a
    problem added when it cannot be one."""
    children = [child for child in node if isinstance(child.tag, str)]
    if not children:
        return _text(node, what, reading)
    child = children[0]
    kind = etree.QName(child).localname
    if kind == "list":
        values = [_value(value, f"{what} list value", reading) for value in child if isinstance(value.tag, str)]
        return None if None in values else "[" + ", ".join(values) + "]"
    if kind == "map":
        entries = []
        for entry in child:
            if isinstance(entry.tag, str):
                value = _value(entry, f"{what} map entry '{entry.get('key')}'", reading)
                entries.append(None if value is None else f"{entry.get('key') or ''!r}: {value}")
        return None if None in entries else "{" + ", ".join(entries) + "}"
    if kind == "script":
        return _script(child, what, reading)
    reading.problems.append((child, f"{what} holds camunda:{kind}; a value is text, a ${{...}} expression, "
                                    "camunda:list, camunda:map or a Python camunda:script."))
    return None


def _text(node: etree._Element, what: str, reading: IoMappingReading) -> str:
    text = node.text or ""
    if not text.strip():
        return "None"
    if "${" not in text and "#{" not in text:
        return repr(text)
    translation = translate(text)
    if translation.problem is not None:
        reading.problems.append((node, f"{what} '{text.strip()[:80]}' cannot be translated from "
                                       f"{translation.dialect}: {translation.problem}"))
        return None
    return translation.python


def _script(script: etree._Element, what: str, reading: IoMappingReading) -> str | None:
    language = (script.get("scriptFormat") or "").strip()
    if script.get("resource"):
        reading.problems.append((script, f"{what} is a {language or 'script'} script loaded from "
                                         f"'{script.get('resource')}', which Baton does not run; write it inline "
                                         "in Python, or as a ${...} expression"))
        return None
    if language.lower() not in SCRIPT_FORMATS:
        reading.problems.append((script, f"camunda:inputOutput with a {language or 'script'} script ({what}) is "
                                         "code Baton does not run: scripts are Python; write the value as a Python "
                                         'camunda:script (scriptFormat="python") or a ${...} expression'))
        return None
    source = (script.text or "").strip()
    problem = check_expression(source) if source else "it is empty"
    if problem is not None:
        reading.problems.append((script, f"{what} script cannot run: {problem} (a Python camunda:script here "
                                         "is one expression, whose value is the parameter's)"))
        return None
    return source
