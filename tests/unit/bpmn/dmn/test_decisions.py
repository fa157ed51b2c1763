"""bpmn.dmn: DMN decision tables read at deploy (hardened, cells translated) and evaluated in the
sandbox by a business rule task, per hit policy."""
from __future__ import annotations

import pytest
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.exceptions import SpiffWorkflowException
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from bpmn.dmn.hit_policies import decide
from bpmn.dmn.reader import read_decisions
from engine.runtime.stepping import describe_failure
from tests.unit.bpmn.refusals import refusal

DMN_NS = "https://www.omg.org/spec/DMN/20191111/MODEL/"


def dmn(rules: list[tuple[list[str], list[str]]], policy: str = "UNIQUE", inputs=("amount", "tier"),
        outputs=("discount",), aggregation: str = "", output_values: str = "", decision: str = "discount") -> str:
    columns = "".join(f'<input id="in{i}" label="{e}"><inputExpression id="ie{i}" typeRef="string"><text>{e}</text>'
                      "</inputExpression></input>" for i, e in enumerate(inputs))
    values = f"<outputValues><text>{output_values}</text></outputValues>" if output_values else ""
    outs = "".join(f'<output id="out{i}" name="{n}" typeRef="string">{values}</output>' for i, n in enumerate(outputs))
    body = "".join(f'<rule id="r{n + 1}">' + "".join(f"<inputEntry><text>{t}</text></inputEntry>" for t in tests)
                   + "".join(f"<outputEntry><text>{o}</text></outputEntry>" for o in outs_) + "</rule>"
                   for n, (tests, outs_) in enumerate(rules))
    agg = f' aggregation="{aggregation}"' if aggregation else ""
    return (f'<?xml version="1.0" encoding="UTF-8"?><definitions xmlns="{DMN_NS}" id="defs" name="d">'
            f'<decision id="{decision}" name="Discount"><decisionTable id="t" hitPolicy="{policy}"{agg}>'
            f"{columns}{outs}{body}</decisionTable></decision></definitions>")


def evaluate_with(decision: dict, data: dict, sandbox):
    return decide(decision, lambda text, extra: sandbox.evaluate(text, {**data, **extra}))


def table(xml: str) -> dict:
    decisions, problems = read_decisions([xml])
    assert problems == []
    [decision] = decisions.values()
    return decision


@pytest.fixture(scope="module")
def sandbox(script_engine):
    return script_engine.sandbox


TIERS = [([" &gt; 1000", '"gold","silver"'], ["0.2"]),
         (["[100..1000]", '"gold"'], ["0.1"]),
         (["-", 'not("gold", "silver")'], ["0"]),
         (["]0..100[", "-"], ["0.05"])]


@pytest.mark.parametrize("amount, tier, expected", [
    (5000, "gold", 0.2), (500, "gold", 0.1), (500, "bronze", 0), (50, "silver", 0.05)])
def test_unique_finds_the_one_rule_that_matches(sandbox, amount, tier, expected):
    assert evaluate_with(table(dmn(TIERS)), {"amount": amount, "tier": tier}, sandbox) == {"discount": expected}


def test_unique_fails_when_two_rules_match_naming_them(sandbox):
    with pytest.raises(ValueError) as caught:
        evaluate_with(table(dmn(TIERS)), {"amount": 50, "tier": "bronze"}, sandbox)
    assert str(caught.value) == ("The decision 'Discount' (discount) has hit policy UNIQUE, but rules 'r3', 'r4' "
                                 "all match the inputs amount = 50, tier = 'bronze'.")


def test_a_single_result_decision_that_matches_nothing_names_the_decision_and_inputs(sandbox):
    with pytest.raises(ValueError) as caught:
        evaluate_with(table(dmn(TIERS[:2])), {"amount": 5, "tier": "gold"}, sandbox)
    assert str(caught.value) == ("The decision 'Discount' (discount) matched no rule for the inputs amount = 5, "
                                 "tier = 'gold'.")


def test_first_takes_the_first_match_in_rule_order(sandbox):
    decision = table(dmn(TIERS, policy="FIRST"))
    assert evaluate_with(decision, {"amount": 50, "tier": "bronze"}, sandbox) == {"discount": 0}


def test_priority_takes_the_match_whose_output_ranks_first(sandbox):
    rules = [(["&gt; 0", "-"], ['"low"']), (["&gt; 100", "-"], ['"high"']), (["&gt; 10", "-"], ['"medium"'])]
    decision = table(dmn(rules, policy="PRIORITY", outputs=("risk",), output_values='"high","medium","low"'))
    assert evaluate_with(decision, {"amount": 500, "tier": "x"}, sandbox) == {"risk": "high"}
    assert evaluate_with(decision, {"amount": 50, "tier": "x"}, sandbox) == {"risk": "medium"}
    ordered = table(dmn(rules, policy="OUTPUT ORDER", outputs=("risk",), output_values='"high","medium","low"'))
    assert evaluate_with(ordered, {"amount": 500, "tier": "x"}, sandbox) == [
        {"risk": "high"}, {"risk": "medium"}, {"risk": "low"}]


def test_any_accepts_agreeing_matches_and_refuses_disagreeing_ones(sandbox):
    rules = [(["&gt; 0", "-"], ['"ok"']), (["&gt; 10", "-"], ['"ok"']), (["&gt; 100", "-"], ['"review"'])]
    decision = table(dmn(rules, policy="ANY", outputs=("verdict",)))
    assert evaluate_with(decision, {"amount": 50, "tier": "x"}, sandbox) == {"verdict": "ok"}
    with pytest.raises(ValueError) as caught:
        evaluate_with(decision, {"amount": 500, "tier": "x"}, sandbox)
    assert "has hit policy ANY, but the matching rules 'r1', 'r2', 'r3' give different outputs" in str(caught.value)


FEES = [(["&gt; 0", "-"], ["10"]), (["&gt; 100", "-"], ["20"]), (["&gt; 1000", "-"], ["20"])]


@pytest.mark.parametrize("policy, aggregation, expected", [
    ("COLLECT", "", [{"fee": 10}, {"fee": 20}, {"fee": 20}]),
    ("RULE ORDER", "", [{"fee": 10}, {"fee": 20}, {"fee": 20}]),
    ("COLLECT", "SUM", 50), ("COLLECT", "MIN", 10), ("COLLECT", "MAX", 20), ("COLLECT", "COUNT", 2),
])
def test_multi_result_policies_list_or_aggregate_every_match(sandbox, policy, aggregation, expected):
    decision = table(dmn(FEES, policy=policy, outputs=("fee",), aggregation=aggregation))
    assert evaluate_with(decision, {"amount": 5000, "tier": "x"}, sandbox) == expected


def test_multi_result_policies_give_nothing_when_nothing_matches(sandbox):
    assert evaluate_with(table(dmn(FEES, policy="COLLECT", outputs=("fee",))), {"amount": 0, "tier": ""}, sandbox) == []
    assert evaluate_with(table(dmn(FEES, policy="COLLECT", outputs=("fee",), aggregation="SUM")),
                         {"amount": 0, "tier": ""}, sandbox) is None


def test_spiffworkflow_python_cells_are_read_too(sandbox):
    rules = [(["== 'gold'", "in ['a', 'b']"], ["True"]), (["-", "4 &lt; ? &lt; 6"], ["False"])]
    decision = table(dmn(rules, policy="FIRST", inputs=("tier", "code"), outputs=("ok",)))
    assert evaluate_with(decision, {"tier": "gold", "code": "a"}, sandbox) == {"ok": True}
    assert evaluate_with(decision, {"tier": "x", "code": 5}, sandbox) == {"ok": False}


@pytest.mark.parametrize("xml, phrase", [
    (dmn([(["&gt;&gt;&gt; 1", "-"], ["1"])]), "rule 'r1': the input entry '>>> 1' is neither a FEEL unary test"),
    (dmn([(["date(\"2020-01-01\")", "-"], ["1"])]), "the function call date(...)"),
    (dmn([(["-", "-"], ["x +"])]), "the output entry 'x +' is neither FEEL"),
    (dmn([(["-"], ["1"])]), "rule 'r1' has 1 input and 1 output entries; the table has 2 and 1"),
    (dmn([], policy="SOMETIMES"), "hit policy 'SOMETIMES' is not one of"),
    (dmn([], policy="FIRST", aggregation="SUM"), "aggregation 'SUM' needs hit policy COLLECT"),
    (dmn([], outputs=("the discount",)), "the output name 'the discount' must be a variable name"),
    ('<!DOCTYPE x [<!ENTITY e "x">]><definitions xmlns="' + DMN_NS + '"/>', "declares a DOCTYPE"),
    ('<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"/>', "is not a DMN 'definitions'"),
])
def test_dmn_files_that_cannot_run_are_refused_naming_file_decision_and_line(xml, phrase):
    _decisions, problems = read_decisions([xml])
    assert problems, phrase
    assert all(p["message"].startswith("DMN file 1") for p in problems)
    assert any(phrase in p["message"] for p in problems), problems


BPMN = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
  xmlns:camunda="http://camunda.org/schema/1.0/bpmn" xmlns:spiffworkflow="http://spiffworkflow.org/bpmn/schema/1.0/core" id="d">
<bpmn:process id="p" isExecutable="true">
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="rate" />
  <bpmn:businessRuleTask id="rate" {attributes}>{extensions}</bpmn:businessRuleTask>
  <bpmn:sequenceFlow id="f2" sourceRef="rate" targetRef="e" /><bpmn:endEvent id="e" />
</bpmn:process></bpmn:definitions>"""


def run(bpmn_xml: str, dmn_xml: str, engine, **variables) -> BpmnWorkflow:
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(bpmn_xml, dmn=[dmn_xml]).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(variables)
    workflow.do_engine_steps()
    return workflow


@pytest.mark.parametrize("attributes, extensions", [
    ('camunda:decisionRef="discount"', ""),
    ("", "<bpmn:extensionElements><spiffworkflow:calledDecisionId>discount</spiffworkflow:calledDecisionId>"
         "</bpmn:extensionElements>"),
])
def test_a_business_rule_task_sets_the_decisions_outputs(script_engine, attributes, extensions):
    workflow = run(BPMN.format(attributes=attributes, extensions=extensions), dmn(TIERS), script_engine,
                   amount=500, tier="gold")
    assert workflow.is_completed() and workflow.data["discount"] == 0.1


@pytest.mark.parametrize("mapping, expected", [
    ("singleEntry", 0.1), ("singleResult", {"discount": 0.1}), ("collectEntries", [0.1]),
    ("resultList", [{"discount": 0.1}])])
def test_camundas_result_variable_and_mapping_shape_the_result(script_engine, mapping, expected):
    attributes = f'camunda:decisionRef="discount" camunda:resultVariable="result" camunda:mapDecisionResult="{mapping}"'
    workflow = run(BPMN.format(attributes=attributes, extensions=""), dmn(TIERS, policy="FIRST"), script_engine,
                   amount=500, tier="gold")
    assert workflow.data["result"] == expected and "discount" not in workflow.data


def test_a_decision_without_a_match_fails_the_instance_at_the_task(script_engine):
    with pytest.raises(SpiffWorkflowException) as caught:
        run(BPMN.format(attributes='camunda:decisionRef="discount"', extensions=""), dmn(TIERS[:2]), script_engine,
            amount=5, tier="gold")
    assert describe_failure(caught.value) == {
        "element_id": "rate",
        "message": "The decision 'Discount' (discount) matched no rule for the inputs amount = 5, tier = 'gold'."}


def test_a_business_rule_task_whose_decision_is_not_deployed_is_refused_naming_it():
    [error] = refusal(BPMN.format(attributes='camunda:decisionRef="pricing"', extensions=""))
    assert (error["element_id"], error["line"]) == ("rate", 6)
    assert error["message"] == ("businessRuleTask calls the decision 'pricing', which is not in the DMN files of "
                                "this deploy (decisions: none: give the DMN files with dmn: [...]).")
    with pytest.raises(Exception) as caught:
        deploy.parse_definition(BPMN.format(attributes='camunda:decisionRef="pricing"', extensions=""), dmn=[dmn(TIERS)])
    assert "(decisions: 'discount')" in caught.value.errors[0]["message"]


def test_a_mapping_that_needs_one_result_is_refused_for_a_collect_decision():
    attributes = 'camunda:decisionRef="discount" camunda:resultVariable="r" camunda:mapDecisionResult="singleEntry"'
    with pytest.raises(Exception) as caught:
        deploy.parse_definition(BPMN.format(attributes=attributes, extensions=""), dmn=[dmn(FEES, policy="COLLECT")])
    assert "needs one result, but 'discount' has hit policy COLLECT" in caught.value.errors[0]["message"]


def test_a_business_rule_task_implemented_like_a_service_is_an_external_task():
    parsed = deploy.parse_definition(BPMN.format(attributes='camunda:class="org.example.Rate"', extensions=""))
    assert parsed.external_topics == ["org.example.Rate"]


@pytest.mark.parametrize("cell, as_input, as_output", [
    ("__import__('os').system('id')", "is neither a FEEL unary test (the function call __import__(...)",
     "nor Python (function '__import__' is not available)"),
    ("().__class__.__bases__", "is neither a FEEL unary test", "nor Python (access to '.__bases__' is not allowed)"),
    ("(" * 3000 + "1" + ")" * 3000, "nested", "nested"),
])
def test_hostile_cells_are_refused_at_deploy_and_never_run(cell, as_input, as_output):
    for rules, phrase in (([([cell, "-"], ["1"])], as_input), ([(["-", "-"], [cell])], as_output)):
        _decisions, problems = read_decisions([dmn(rules)])
        assert problems and phrase in problems[0]["message"], problems


def test_a_billion_laughs_dmn_is_refused_quickly():
    import time
    bomb = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
            + "".join(f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i else "&lol;" * 10}">' for i in range(9))
            + f']><definitions xmlns="{DMN_NS}">&lol8;</definitions>')
    started = time.perf_counter()
    _decisions, [problem] = read_decisions([bomb])
    assert "DOCTYPE" in problem["message"] and time.perf_counter() - started < 1.0
