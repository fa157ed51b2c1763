"""DMN through the real server, on SQLite and PostgreSQL: definition.deploy takes the DMN files
with the BPMN, a business rule task evaluates its decision table in the sandbox, one table per hit
policy; a single-result decision that matches nothing fails the instance at its element naming
the decision and the inputs; definition.get gives the DMN files back."""
from __future__ import annotations

import pytest

from tests.harness import RpcError
from tests.integration.test_bpmn_runtime import start
from tests.unit.bpmn.dmn.test_decisions import TIERS, dmn

PRICING = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d">
  <bpmn:process id="pricing" isExecutable="true">
    <bpmn:startEvent id="start" /><bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="decide" />
    <bpmn:businessRuleTask id="decide" camunda:decisionRef="discount" />
    <bpmn:sequenceFlow id="f2" sourceRef="decide" targetRef="end" /><bpmn:endEvent id="end" />
  </bpmn:process>
</bpmn:definitions>"""
# Each rule's output is distinct so that which rules matched shows in the result.
RANKED = [(["&gt; 100", "-"], ['"high"']), (["&gt; 10", "-"], ['"mid"']), (["-", '"gold"'], ['"loyal"'])]
NUMBERS = [(["&gt; 100", "-"], ["10"]), (["&gt; 10", "-"], ["5"]), (["-", '"gold"'], ["2"])]


@pytest.mark.parametrize("policy, aggregation, rules, expected", [
    ("UNIQUE", "", TIERS, 0.1),
    ("FIRST", "", RANKED, "high"),
    ("PRIORITY", "", RANKED, "loyal"),      # outputValues rank loyal first
    ("ANY", "", [(["&gt; 10", "-"], ['"yes"']), (["-", '"gold"'], ['"yes"'])], "yes"),
    ("COLLECT", "", RANKED, ["high", "mid", "loyal"]),
    ("COLLECT", "SUM", NUMBERS, 17),
    ("COLLECT", "MIN", NUMBERS, 2),
    ("COLLECT", "MAX", NUMBERS, 10),
    ("COLLECT", "COUNT", NUMBERS, 3),
    ("RULE ORDER", "", RANKED, ["high", "mid", "loyal"]),
    ("OUTPUT ORDER", "", RANKED, ["loyal", "mid", "high"]),
])
def test_a_business_rule_task_evaluates_its_table_per_hit_policy(api, unique_code, policy, aggregation, rules,
                                                                 expected):
    ranked = '"loyal","mid","high"' if policy in ("PRIORITY", "OUTPUT ORDER") else ""
    table = dmn(rules, policy=policy, aggregation=aggregation, output_values=ranked)
    deployed = api.deploy(PRICING, code=unique_code, dmn=[table])
    done = api.wait_for(start(api, unique_code, amount=500, tier="gold"))
    assert done["status"] == "completed", done
    assert done["variables"]["discount"] == expected
    assert api.call("definition.get", definition_id=deployed["definition_id"])["dmn"] == [table]


def test_a_decision_that_matches_nothing_fails_the_instance_at_its_element(api, unique_code):
    api.deploy(PRICING, code=unique_code, dmn=[dmn(TIERS[:2])])
    failed = api.wait_for(start(api, unique_code, amount=5, tier="gold"))
    assert failed["status"] == "failed"
    assert failed["error"] == {"element_id": "decide", "message": "The decision 'Discount' (discount) matched no rule "
                                                                  "for the inputs amount = 5, tier = 'gold'."}


def test_a_decision_missing_from_the_deploy_or_a_bad_dmn_file_is_refused(api, unique_code):
    with pytest.raises(RpcError) as missing:
        api.deploy(PRICING, code=unique_code)
    assert missing.value.reason == "invalid_params"
    assert "calls the decision 'discount', which is not in the DMN files" in missing.value.data["errors"][0]["message"]
    with pytest.raises(RpcError) as bad:
        api.deploy(PRICING, code=unique_code, dmn=[12])
    assert bad.value.reason == "invalid_params" and bad.value.message == "Parameter 'dmn[0]' must be a string."
