"""Evaluating a decision table (as ``bpmn.dmn.reader`` stores it) with its hit policy.

Every cell is a sandbox expression, evaluated by the ``evaluate(expression, names)`` the caller
passes (the workflow's sandboxed script engine): nothing here runs Python of a model's own.

Single-result policies (UNIQUE, FIRST, PRIORITY, ANY) fail when no rule matches, naming the
decision and its inputs: a business rule task without a result would silently break the gateway
after it (Camunda returns null there). UNIQUE fails when several rules match, ANY when matching
rules disagree. Multi-result policies (COLLECT, RULE ORDER, OUTPUT ORDER) give a list, empty when
nothing matches; COLLECT with an aggregation gives a number (COUNT counts distinct values, as the
DMN standard says; SUM, MIN and MAX of nothing are null).
"""
from __future__ import annotations

from typing import Any, Callable

INPUT = "dmn_input"  # the name the column's value has inside a test (bpmn.dmn.cells writes the tests at deploy)
SINGLE = ("UNIQUE", "FIRST", "PRIORITY", "ANY")
# evaluate(expression, extra names): the value of a sandbox expression over the task's variables
# and ``extra`` (the column's input value, as dmn_input, inside a test).
Evaluate = Callable[[str, dict], Any]


def decide(decision: dict, evaluate: Evaluate):
    """A dict of outputs (single-result policies), a list of them, or a number (aggregations)."""
    values = [evaluate(column["expression"], {}) for column in decision["inputs"]]
    policy = decision["hit_policy"]
    candidates = (rule for rule in decision["rules"] if _matches(rule, values, evaluate))
    # FIRST stops at its match: later rules may not even be evaluable for these inputs.
    if policy == "FIRST":
        first = next(candidates, None)
        matched = [first] if first is not None else []
    else:
        matched = list(candidates)
    if policy in SINGLE and not matched:
        raise ValueError(f"The decision {_title(decision)} matched no rule for {_inputs(decision, values)}.")
    results = [_outputs(decision, rule, evaluate) for rule in matched]
    if policy == "UNIQUE" and len(matched) > 1:
        raise ValueError(f"The decision {_title(decision)} has hit policy UNIQUE, but rules "
                         f"{', '.join(repr(r['id']) for r in matched)} all match {_inputs(decision, values)}.")
    if policy == "ANY" and any(result != results[0] for result in results):
        raise ValueError(f"The decision {_title(decision)} has hit policy ANY, but the matching rules "
                         f"{', '.join(repr(r['id']) for r in matched)} give different outputs for "
                         f"{_inputs(decision, values)}.")
    if policy in ("PRIORITY", "OUTPUT ORDER"):
        results = sorted(results, key=lambda result: _rank(decision, result, evaluate))
    if policy in SINGLE:
        return results[0]
    if decision["aggregation"]:
        return _aggregate(decision["aggregation"], [result[decision["outputs"][0]["name"]] for result in results])
    return results


def _matches(rule: dict, values: list, evaluate: Evaluate) -> bool:
    for test, value in zip(rule["tests"], values):
        if test is not None and not evaluate(test, {INPUT: value}):
            return False
    return True


def _outputs(decision: dict, rule: dict, evaluate: Evaluate) -> dict:
    return {column["name"]: evaluate(entry, {}) for column, entry in zip(decision["outputs"], rule["outputs"])}


def _rank(decision: dict, result: dict, evaluate: Evaluate) -> tuple:
    """Position of each output value in its column's outputValues (unlisted values rank last)."""
    rank = []
    for column in decision["outputs"]:
        if column["ranked"]:
            ranked = [evaluate(value, {}) for value in column["ranked"]]
            value = result[column["name"]]
            rank.append(ranked.index(value) if value in ranked else len(ranked))
    return tuple(rank)


def _aggregate(kind: str, values: list):
    present = [value for value in values if value is not None]
    if kind == "COUNT":
        distinct = []
        for value in present:
            if value not in distinct:
                distinct.append(value)
        return len(distinct)
    if not present:
        return None
    if kind == "SUM":
        return sum(present)
    return min(present) if kind == "MIN" else max(present)


def _title(decision: dict) -> str:
    return f"'{decision['name']}' ({decision['id']})" if decision["name"] != decision["id"] else f"'{decision['id']}'"


def _inputs(decision: dict, values: list) -> str:
    if not values:
        return "its inputs (it has none)"
    shown = []
    for column, value in zip(decision["inputs"], values):
        text = repr(value)
        shown.append(f"{column['label']} = {text if len(text) <= 60 else text[:59] + '…'}")
    return "the inputs " + ", ".join(shown)


def result_variables(decision: dict, result, result_variable: str | None, mapping: str | None) -> dict:
    """The variables a business rule task sets from a result. Without ``camunda:resultVariable``
    (SpiffArena's way) each output becomes a variable: a value, a list of values for the
    multi-result policies, the number of an aggregation. With one, Camunda's
    ``camunda:mapDecisionResult`` decides its value: singleEntry, singleResult, collectEntries or
    resultList (the default)."""
    names = [column["name"] for column in decision["outputs"]]
    if result_variable is None:
        if isinstance(result, dict):
            return dict(result)
        if isinstance(result, list):
            return {name: [row[name] for row in result] for name in names}
        return {names[0]: result}
    rows = [result] if isinstance(result, dict) else result if isinstance(result, list) else None
    mapping = mapping or "resultList"
    if rows is None:  # an aggregation: a number whatever the mapping
        return {result_variable: result}
    if mapping == "singleEntry":
        return {result_variable: rows[0][names[0]] if rows else None}
    if mapping == "singleResult":
        return {result_variable: rows[0] if rows else None}
    if mapping == "collectEntries":
        return {result_variable: [row[names[0]] for row in rows]}
    return {result_variable: rows}
