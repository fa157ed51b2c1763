"""Loops: standardLoopCharacteristics and multiInstanceLoopCharacteristics, as SpiffWorkflow 3.2 reads them.

Standard loop: ``loopCondition`` (Python; the loop goes on while it is true) and/or
``loopMaximum``; ``testBefore``. Multi-instance: ``isSequential``; exactly one of
``loopCardinality`` (a number or Python expression) and ``loopDataInputRef`` (a variable holding
a list or dict; Camunda Modeler's ``camunda:collection`` means the same) with ``inputDataItem``
(or ``camunda:elementVariable``) naming each instance's item; optionally ``loopDataOutputRef``
with ``outputDataItem``; ``completionCondition`` (Python). Literal counts are capped at deploy.
"""
from __future__ import annotations

from lxml import etree

from bpmn.allowlist import LOOPS, MAX_LOOP_CARDINALITY
from bpmn.checks.code import check_python_expression
from bpmn.checks.elements import bpmn_children, child_named, content, is_event_subprocess
from bpmn.expressions import translate
from bpmn.issues import Issues, local_name
from bpmn.profile import BPMN_NS, CAMUNDA_NS, ZEEBE_NS

_MI_CHILDREN = frozenset({"documentation", "extensionElements", "loopCardinality", "loopDataInputRef",
                          "loopDataOutputRef", "inputDataItem", "outputDataItem", "completionCondition"})
_STANDARD_CHILDREN = frozenset({"documentation", "extensionElements", "loopCondition"})


def camunda(attribute: str) -> str:
    return f"{{{CAMUNDA_NS}}}{attribute}"


def zeebe_loop(loop: etree._Element) -> dict[str, str]:
    """Camunda 8's ``zeebe:loopCharacteristics`` attributes of a multi-instance (inputCollection,
    inputElement, outputCollection, outputElement), or an empty dict."""
    found = loop.find(f"./{{{BPMN_NS}}}extensionElements/{{{ZEEBE_NS}}}loopCharacteristics")
    return dict(found.attrib) if found is not None else {}


def check_loops(container: etree._Element, issues: Issues) -> None:
    for element in content(container):
        loops = [child for child in bpmn_children(element) if local_name(child) in LOOPS]
        if loops and is_event_subprocess(element):
            issues.add(element, "An event subProcess cannot loop: its start event starts it.", at=loops[0])
            continue
        if len(loops) > 1:
            issues.add(element, f"{local_name(element)} has more than one loop characteristics element.")
        for loop in loops:
            if local_name(loop) == "standardLoopCharacteristics":
                _check_standard(element, loop, issues)
            else:
                _check_multi_instance(element, loop, issues)


def _unknown_children(element, loop, allowed, issues: Issues) -> None:
    for child in bpmn_children(loop):
        if local_name(child) not in allowed:
            issues.add(element, f"{local_name(loop)} with {local_name(child)} is not supported yet.", at=child)


def _check_standard(element, loop, issues: Issues) -> None:
    _unknown_children(element, loop, _STANDARD_CHILDREN, issues)
    condition = child_named(loop, "loopCondition")
    maximum = loop.get("loopMaximum")
    if condition is None and maximum is None:
        issues.add(element, "standardLoopCharacteristics needs a loopCondition or a loopMaximum.", at=loop)
    if maximum is not None:
        _check_count(element, loop, "loopMaximum", maximum, issues)
    if condition is not None:
        check_python_expression(element, condition, "loopCondition", issues)
    if loop.get("testBefore", "false") not in ("true", "false"):
        issues.add(element, "standardLoopCharacteristics testBefore must be true or false.", at=loop)


def _check_multi_instance(element, loop, issues: Issues) -> None:
    _unknown_children(element, loop, _MI_CHILDREN, issues)
    if loop.get("isSequential", "false") not in ("true", "false"):
        issues.add(element, "multiInstanceLoopCharacteristics isSequential must be true or false.", at=loop)
    cardinality = child_named(loop, "loopCardinality")
    data_input = child_named(loop, "loopDataInputRef")
    zeebe = zeebe_loop(loop)
    collection = loop.get(camunda("collection"))
    if collection is None:
        collection = zeebe.get("inputCollection")
    sources = [s for s in (cardinality, data_input, collection) if s is not None]
    if not sources:
        issues.add(element, "multiInstanceLoopCharacteristics needs a loopCardinality or a collection "
                            "(loopDataInputRef, Camunda: Collection) to repeat over.", at=loop)
    elif len(sources) > 1:
        issues.add(element, "multiInstanceLoopCharacteristics needs exactly one of loopCardinality, "
                            "loopDataInputRef and camunda:collection.", at=loop)
    if cardinality is not None:
        _check_cardinality(element, cardinality, issues)
    for what, node in (("loopDataInputRef", data_input), ("loopDataOutputRef", child_named(loop, "loopDataOutputRef"))):
        if node is not None:
            _check_variable(element, what, (node.text or "").strip(), node, issues)
    if collection is not None:
        what = "camunda:collection" if loop.get(camunda("collection")) is not None else "zeebe:inputCollection"
        _check_variable(element, what, collection.strip(), loop, issues)
    for attribute in ("inputElement", "outputCollection", "outputElement"):
        if zeebe.get(attribute) is not None:
            _check_variable(element, f"zeebe:{attribute}", zeebe[attribute].strip(), loop, issues)
    if ("outputCollection" in zeebe) != ("outputElement" in zeebe):
        issues.add(element, "zeebe:loopCharacteristics needs outputCollection and outputElement together.", at=loop)
    for what in ("inputDataItem", "outputDataItem"):
        item = child_named(loop, what)
        if item is not None:
            _check_variable(element, f"{what} id", (item.get("id") or "").strip(), item, issues)
    if loop.get(camunda("elementVariable")) is not None:
        _check_variable(element, "camunda:elementVariable", loop.get(camunda("elementVariable")).strip(), loop, issues)
    has_output_ref = child_named(loop, "loopDataOutputRef") is not None
    if has_output_ref != (child_named(loop, "outputDataItem") is not None):
        issues.add(element, "multiInstanceLoopCharacteristics needs loopDataOutputRef and outputDataItem "
                            "together (the item each instance sets, and the list that collects them).", at=loop)
    condition = child_named(loop, "completionCondition")
    if condition is not None:
        check_python_expression(element, condition, "completionCondition", issues)


def _check_cardinality(element, node, issues: Issues) -> None:
    text = (node.text or "").strip()
    if text.lstrip("-").isdigit():
        _check_count(element, node, "loopCardinality", text, issues)
    else:
        check_python_expression(element, node, "loopCardinality", issues)


def _check_count(element, node, what: str, raw: str, issues: Issues) -> None:
    value = raw.strip()
    if not value.lstrip("-").isdigit():
        issues.add(element, f"{what} '{raw}' must be a whole number.", at=node)
    elif not 0 <= int(value) <= MAX_LOOP_CARDINALITY:
        issues.add(element, f"{what} {int(value)} is more than the {MAX_LOOP_CARDINALITY} repetitions "
                            "Baton allows." if int(value) > 0 else f"{what} {int(value)} is negative.", at=node)


def _check_variable(element, what: str, name: str, node, issues: Issues) -> None:
    if name.startswith(("${", "#{", "=")):
        variable = collection_variable(name)
        if variable is None:
            issues.add(element, f"{what} '{name}' must name one variable, such as ${{items}} or items; "
                                "a computed collection is not supported (compute it in a scriptTask first).",
                       at=node)
    elif not name.isidentifier() or name.startswith("__"):
        issues.add(element, f"{what} '{name}' must be a variable name, such as items.", at=node)


def collection_variable(text: str) -> str | None:
    """The variable a collection names: ``items``, JUEL ``${items}`` or FEEL ``= items``; else None."""
    translation = translate(text)
    python = translation.python
    return python if python is not None and python.isidentifier() and not python.startswith("__") else None
