"""bpmn/: what Camunda Modeler users draw deploys and runs: JUEL and FEEL translated at deploy,
service tasks without an operator parked as external tasks, Camunda's code-bearing extensions
refused naming what to change.

Each model is deployed with ``parse_definition``, restored from its stored ``spec_json`` and run in
memory with the sandboxed script engine, as the engine does.
"""
from __future__ import annotations

import pytest
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState

import bpmn
from tests.unit.refusals import refusal

HEADER = ('<?xml version="1.0" encoding="UTF-8"?>\n'
          '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
          'xmlns:camunda="http://camunda.org/schema/1.0/bpmn" '
          'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d">\n')


def model(body: str) -> str:
    return HEADER + f'<bpmn:process id="p" isExecutable="true">{body}</bpmn:process></bpmn:definitions>'


def run(xml: str, engine, **variables) -> BpmnWorkflow:
    spec, subprocess_specs = bpmn.load_spec(bpmn.parse_definition(xml).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(variables)
    workflow.do_engine_steps()
    return workflow


def gateway(yes: str, no: str) -> str:
    return model(f"""
  <bpmn:startEvent id="start" />
  <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="g" />
  <bpmn:exclusiveGateway id="g" />
  <bpmn:sequenceFlow id="yes" sourceRef="g" targetRef="approve">
    <bpmn:conditionExpression xsi:type="bpmn:tFormalExpression"
      xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">{yes}</bpmn:conditionExpression>
  </bpmn:sequenceFlow>
  <bpmn:sequenceFlow id="no" sourceRef="g" targetRef="reject">
    <bpmn:conditionExpression>{no}</bpmn:conditionExpression>
  </bpmn:sequenceFlow>
  <bpmn:scriptTask id="approve"><bpmn:script>outcome = "approved"</bpmn:script></bpmn:scriptTask>
  <bpmn:scriptTask id="reject"><bpmn:script>outcome = "rejected"</bpmn:script></bpmn:scriptTask>
  <bpmn:sequenceFlow id="f2" sourceRef="approve" targetRef="end" />
  <bpmn:sequenceFlow id="f3" sourceRef="reject" targetRef="end" />
  <bpmn:endEvent id="end" />""")


# -- JUEL and FEEL ----------------------------------------------------------------------------------

@pytest.mark.parametrize("yes, no", [
    ("${amount &gt; 100 &amp;&amp; customer.tier eq 'gold'}", "${!(amount &gt; 100 &amp;&amp; customer.tier eq 'gold')}"),
    ("#{approved}", "#{not approved}"),
    ("= amount &gt; 100 and customer.tier = \"gold\"", "= not(amount &gt; 100 and customer.tier = \"gold\")"),
])
def test_juel_and_feel_gateway_conditions_are_stored_translated_and_route(script_engine, yes, no):
    xml = gateway(yes, no)
    stored = bpmn.parse_definition(xml).spec_json
    assert "${" not in stored and "&&" not in stored  # the spec holds Python, not JUEL
    assert run(xml, script_engine, amount=150, customer={"tier": "gold"}, approved=True).data["outcome"] == "approved"
    assert run(xml, script_engine, amount=50, customer={"tier": "gold"}, approved=False).data["outcome"] == "rejected"


def test_an_untranslatable_condition_is_refused_naming_the_construct_element_and_line():
    [error] = refusal(gateway("${customer.prop(\"age\").numberValue() &gt;= 21}", "${true}"))
    assert error["element_id"] == "yes"
    assert error["line"] == 9  # the conditionExpression
    assert error["message"] == (
        "sequenceFlow condition '${customer.prop(\"age\").numberValue() >= 21}' cannot be translated from JUEL: "
        "the method call prop(...) at position 12 is outside the subset Baton translates; write it as a "
        "Python expression, such as amount > 100.")


def test_a_juel_collection_and_loop_condition_run(script_engine):
    xml = model("""
  <bpmn:startEvent id="start" />
  <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="each" />
  <bpmn:scriptTask id="each">
    <bpmn:multiInstanceLoopCharacteristics camunda:collection="${scores}" camunda:elementVariable="score">
      <bpmn:completionCondition>${nrOfCompletedInstances &gt;= 99}</bpmn:completionCondition>
    </bpmn:multiInstanceLoopCharacteristics>
    <bpmn:script>seen = score</bpmn:script>
  </bpmn:scriptTask>
  <bpmn:sequenceFlow id="f2" sourceRef="each" targetRef="again" />
  <bpmn:scriptTask id="again">
    <bpmn:standardLoopCharacteristics><bpmn:loopCondition>${tries lt 3}</bpmn:loopCondition></bpmn:standardLoopCharacteristics>
    <bpmn:script>tries = tries + 1</bpmn:script>
  </bpmn:scriptTask>
  <bpmn:sequenceFlow id="f3" sourceRef="again" targetRef="end" />
  <bpmn:endEvent id="end" />""")
    workflow = run(xml, script_engine, scores=[3, 9], tries=0, nrOfCompletedInstances=0)
    assert workflow.is_completed()
    assert workflow.data["tries"] == 3


def test_a_juel_timer_duration_is_computed_from_the_variables(script_engine):
    xml = model("""
  <bpmn:startEvent id="start" />
  <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait" />
  <bpmn:intermediateCatchEvent id="wait">
    <bpmn:timerEventDefinition><bpmn:timeDuration>${delay}</bpmn:timeDuration></bpmn:timerEventDefinition>
  </bpmn:intermediateCatchEvent>
  <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end" />
  <bpmn:endEvent id="end" />""")
    workflow = run(xml, script_engine, delay="PT1H")
    [waiting] = [t for t in workflow.get_tasks(state=TaskState.WAITING) if t.task_spec.bpmn_id == "wait"]
    assert waiting.internal_data["event_value"] > "2000"
