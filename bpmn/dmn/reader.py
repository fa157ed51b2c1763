"""DMN 1.x files read at deploy into decisions Baton evaluates: plain dicts with Python cells.

Each file is read like a BPMN upload (no DOCTYPE, no entity, nothing fetched). A decision is a
``decisionTable`` with inputs (their input expressions), outputs (names, and ``outputValues`` that
rank them for PRIORITY and OUTPUT ORDER) and rules; every cell is translated here
(``bpmn.dmn.cells``), so the stored decision carries only sandbox expressions. Problems are
collected like BPMN ones: ``{element_id, line, message}``, the message naming the DMN file (by its
position in the deploy) and the decision.
"""
from __future__ import annotations

from typing import Any

from lxml import etree

from bpmn.dmn.cells import expression, input_test
from bpmn.hardened_xml import read_xml
from bpmn.issues import Issues, issue, local_name
from engine.errors import BpmnValidationError

HIT_POLICIES = ("UNIQUE", "FIRST", "PRIORITY", "ANY", "COLLECT", "RULE ORDER", "OUTPUT ORDER")
AGGREGATIONS = ("SUM", "MIN", "MAX", "COUNT")


def read_decisions(files: list[str | bytes]) -> tuple[dict[str, dict[str, Any]], list[dict]]:
    """({decision id: decision}, problems) of the DMN files of one deploy."""
    decisions: dict[str, dict[str, Any]] = {}
    problems: list[dict] = []
    for number, source in enumerate(files, start=1):
        where = f"DMN file {number}"
        try:
            tree = read_xml(source, "DMN")
        except BpmnValidationError as refused:
            problems += [{**e, "message": f"{where}: {e['message']}"} for e in refused.errors]
            continue
        root = tree.getroot()
        if local_name(root) != "definitions" or "omg.org/spec/DMN" not in (etree.QName(root).namespace or ""):
            problems.append(issue(None, root.sourceline, f"{where}: the root element is not a DMN 'definitions'."))
            continue
        issues = Issues(tree)
        for element in root:
            if isinstance(element.tag, str) and local_name(element) == "decision":
                decision = _decision(element, f"{where}, decision '{element.get('id')}'", issues)
                if decision is not None and decision["id"] in decisions:
                    issues.add(element, f"{where}: the decision '{decision['id']}' is defined twice in this deploy.")
                elif decision is not None:
                    decisions[decision["id"]] = decision
        if issues:
            try:
                issues.raise_if_any()
            except BpmnValidationError as refused:
                problems += refused.errors
    return decisions, problems


def _decision(element, where: str, issues: Issues) -> dict[str, Any] | None:
    if not element.get("id"):
        issues.add(element, f"{where}: a decision needs an id.")
        return None
    tables = [child for child in element if isinstance(child.tag, str) and local_name(child) == "decisionTable"]
    if len(tables) != 1:
        other = next((local_name(c) for c in element if isinstance(c.tag, str)
                      and local_name(c) in ("literalExpression", "context", "invocation")), None)
        what = f"a {other}" if other else f"{len(tables)} decision tables"
        issues.add(element, f"{where}: it has {what}; Baton evaluates decisions made of one decisionTable.")
        return None
    for requirement in element:
        if isinstance(requirement.tag, str) and local_name(requirement) == "informationRequirement" \
                and any(local_name(c) == "requiredDecision" for c in requirement if isinstance(c.tag, str)):
            issues.add(requirement, f"{where}: it requires another decision; decision requirement graphs are "
                                    "not supported yet (give the business rule task the variables it needs).")
    return _table(element, tables[0], where, issues)


def _table(decision, table, where: str, issues: Issues) -> dict[str, Any] | None:
    policy = (table.get("hitPolicy") or "UNIQUE").strip().upper().replace("_", " ")
    aggregation = (table.get("aggregation") or "").strip().upper() or None
    if policy not in HIT_POLICIES:
        issues.add(table, f"{where}: hit policy '{table.get('hitPolicy')}' is not one of {', '.join(HIT_POLICIES)}.")
    if aggregation and (policy != "COLLECT" or aggregation not in AGGREGATIONS):
        issues.add(table, f"{where}: aggregation '{aggregation}' needs hit policy COLLECT and is one of "
                          f"{', '.join(AGGREGATIONS)}.")
    children = [c for c in table if isinstance(c.tag, str)]
    inputs = [_input(c, where, issues) for c in children if local_name(c) == "input"]
    outputs = [_output(c, where, issues) for c in children if local_name(c) == "output"]
    if not outputs:
        issues.add(table, f"{where}: the decision table has no output.")
    if aggregation and len(outputs) != 1:
        issues.add(table, f"{where}: an aggregation needs exactly one output.")
    rules = [_rule(c, len(inputs), len(outputs), where, issues) for c in children if local_name(c) == "rule"]
    return {"id": decision.get("id"), "name": decision.get("name") or decision.get("id"), "hit_policy": policy,
            "aggregation": aggregation, "inputs": inputs, "outputs": outputs, "rules": rules}


def _input(element, where: str, issues: Issues) -> dict[str, Any]:
    node = next((c for c in element.iter() if isinstance(c.tag, str) and local_name(c) == "text"), None)
    label = element.get("label") or element.get("id") or "input"
    python, problem = expression(node.text if node is not None else "", f"input expression of '{label}'")
    if problem:
        issues.add(element, f"{where}: {problem}.", at=node if node is not None else element)
    return {"label": label, "expression": python}


def _output(element, where: str, issues: Issues) -> dict[str, Any]:
    name = (element.get("name") or "").strip()
    if not name.isidentifier() or name.startswith("__"):
        issues.add(element, f"{where}: the output name '{name}' must be a variable name.")
    ranked = None
    values = next((c for c in element if isinstance(c.tag, str) and local_name(c) == "outputValues"), None)
    if values is not None:
        text = next((c.text for c in values if isinstance(c.tag, str) and local_name(c) == "text"), "") or ""
        ranked = []
        for part in _split_list(text):
            python, problem = expression(part, f"output value '{part}' of '{name}'")
            if problem:
                issues.add(values, f"{where}: {problem}.")
            ranked.append(python)
    return {"name": name, "ranked": ranked}


def _rule(element, n_inputs: int, n_outputs: int, where: str, issues: Issues) -> dict[str, Any]:
    entries = [c for c in element if isinstance(c.tag, str)]
    texts = {kind: [next((t.text for t in e if isinstance(t.tag, str) and local_name(t) == "text"), "")
                    for e in entries if local_name(e) == kind] for kind in ("inputEntry", "outputEntry")}
    rule_id = element.get("id") or "rule"
    if len(texts["inputEntry"]) != n_inputs or len(texts["outputEntry"]) != n_outputs:
        issues.add(element, f"{where}: rule '{rule_id}' has {len(texts['inputEntry'])} input and "
                            f"{len(texts['outputEntry'])} output entries; the table has {n_inputs} and {n_outputs}.")
    tests = []
    for text in texts["inputEntry"]:
        python, problem = input_test(text)
        if problem:
            issues.add(element, f"{where}: rule '{rule_id}': {problem}.")
        tests.append(python)
    outputs = []
    for text in texts["outputEntry"]:
        python, problem = expression(text, "output entry") if (text or "").strip() else ("None", None)
        if problem:
            issues.add(element, f"{where}: rule '{rule_id}': {problem}.")
        outputs.append(python)
    return {"id": rule_id, "line": element.sourceline, "tests": tests, "outputs": outputs}


def _split_list(text: str) -> list[str]:
    """``"high","medium", "low"`` -> its items (commas inside quotes kept)."""
    items, current, quote = [], "", None
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == ",":
            items.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        items.append(current.strip())
    return items
