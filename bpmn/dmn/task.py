"""Business rule tasks: a DMN decision evaluated in the sandbox when the task runs.

The decision a task calls (Camunda's ``camunda:decisionRef``, SpiffArena's
``spiffworkflow:calledDecisionId``) is copied, already translated, into
``task_spec.extensions['decision']`` at deploy, so the stored spec needs no DMN file at run time.
A business rule task implemented like a service task (``camunda:class``, ``camunda:type="external"``
...) is an external task instead. Decision: Baton evaluates decisions with its own small evaluator
(``bpmn.dmn.hit_policies``), not SpiffWorkflow's DMN engine, which knows only UNIQUE (without
checking uniqueness) and COLLECT (without aggregation), builds each cell's Python by string
concatenation at run time, reads one decision per file and no FEEL.
"""
from __future__ import annotations

from lxml import etree
from SpiffWorkflow.bpmn.exceptions import WorkflowTaskException
from SpiffWorkflow.spiff.specs.spiff_task import SpiffBpmnTask

from bpmn.dmn.hit_policies import SINGLE, decide, result_variables
from bpmn.issues import Issues
from bpmn.profile import CAMUNDA_NS, NSMAP

_SPIFF_DECISION = "./bpmn:extensionElements/spiffworkflow:calledDecisionId"
_MAPPINGS = ("singleEntry", "singleResult", "collectEntries", "resultList")
_IMPLEMENTATIONS = ("class", "delegateExpression", "expression", "type")


class DecisionTask(SpiffBpmnTask):
    """Evaluates ``extensions['decision']`` and sets its result as variables."""

    def _run_hook(self, my_task):
        config = self.extensions["decision"]
        engine = my_task.workflow.script_engine
        try:
            result = decide(config["decision"], lambda text, extra: engine.evaluate(my_task, text, extra))
        except ValueError as exc:
            error = WorkflowTaskException(str(exc), task=my_task)
            error.message = str(exc)
            raise error from None
        my_task.data.update(result_variables(config["decision"], result, config["result_variable"],
                                             config["map"]))
        return True


def decision_ref(node: etree._Element) -> str | None:
    ref = (node.get(f"{{{CAMUNDA_NS}}}decisionRef") or "").strip()
    if not ref:
        found = node.xpath(_SPIFF_DECISION, namespaces=NSMAP)
        ref = (found[0].text or "").strip() if found else ""
    return ref or None


def is_implemented_like_a_service(node: etree._Element) -> bool:
    return any(node.get(f"{{{CAMUNDA_NS}}}{attribute}") for attribute in _IMPLEMENTATIONS)


def decision_config(node: etree._Element, decisions: dict) -> dict:
    return {"decision": decisions[decision_ref(node)],
            "result_variable": (node.get(f"{{{CAMUNDA_NS}}}resultVariable") or "").strip() or None,
            "map": (node.get(f"{{{CAMUNDA_NS}}}mapDecisionResult") or "").strip() or None}


def check_business_rule_task(element: etree._Element, decisions: dict, issues: Issues) -> None:
    """Its decision must be among the DMN files of the deploy, and its result mapping must fit it."""
    ref = decision_ref(element)
    if ref is None:
        if not is_implemented_like_a_service(element):
            issues.add(element, "businessRuleTask needs a decision: camunda:decisionRef (or SpiffArena's "
                                "calledDecisionId) naming a decision of the DMN files deployed with it.")
        return
    if ref not in decisions:
        known = ", ".join(f"'{d}'" for d in decisions) or "none: give the DMN files with dmn: [...]"
        issues.add(element, f"businessRuleTask calls the decision '{ref}', which is not in the DMN files of "
                            f"this deploy (decisions: {known}).")
        return
    decision = decisions[ref]
    mapping = (element.get(f"{{{CAMUNDA_NS}}}mapDecisionResult") or "").strip() or None
    if mapping is not None and mapping not in _MAPPINGS:
        issues.add(element, f"businessRuleTask mapDecisionResult '{mapping}' is not one of {', '.join(_MAPPINGS)}.")
    if mapping in ("singleEntry", "collectEntries") and len(decision["outputs"]) != 1:
        issues.add(element, f"businessRuleTask mapDecisionResult '{mapping}' needs a decision with one output; "
                            f"'{ref}' has {len(decision['outputs'])}.")
    if mapping in ("singleEntry", "singleResult") and decision["hit_policy"] not in SINGLE \
            and not decision["aggregation"]:
        issues.add(element, f"businessRuleTask mapDecisionResult '{mapping}' needs one result, but '{ref}' has "
                            f"hit policy {decision['hit_policy']}; use collectEntries or resultList.")
