"""The two defects of issue 14, each pinned by a test that failed on the code before the fix.

* A parallel multi-instance over a missing, null or non-iterable collection (or a cardinality that
  is not a whole number) leaked SpiffWorkflow's bare TypeError, which the runner takes for an
  internal error and retries. It must fail at the element with a WorkflowException naming the
  collection (or cardinality) and what it got, which the runner turns into a failed instance.
* A callActivity inside an embedded subProcess was refused at deploy (SpiffWorkflow 3.2's
  ``get_subprocess_specs`` forgets ``require_call_activity_specs=False`` when it recurses).
"""
from __future__ import annotations

import pytest
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.exceptions import SpiffWorkflowException
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from engine.runtime.stepping import describe_failure

HEADER = ('<?xml version="1.0" encoding="UTF-8"?>\n'
          '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d">\n')


def parallel_over(source: str) -> str:
    return HEADER + f"""<bpmn:process id="p" isExecutable="true">
  <bpmn:startEvent id="start" />
  <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="each" />
  <bpmn:scriptTask id="each">
    <bpmn:multiInstanceLoopCharacteristics>{source}</bpmn:multiInstanceLoopCharacteristics>
    <bpmn:script>done = True</bpmn:script>
  </bpmn:scriptTask>
  <bpmn:sequenceFlow id="f2" sourceRef="each" targetRef="end" />
  <bpmn:endEvent id="end" />
</bpmn:process></bpmn:definitions>"""


COLLECTION = '<bpmn:loopDataInputRef>items</bpmn:loopDataInputRef><bpmn:inputDataItem id="item" />'


def run(xml: str, engine, **variables) -> BpmnWorkflow:
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(xml).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(variables)
    workflow.do_engine_steps()
    return workflow


@pytest.mark.parametrize("sequential", ["false", "true"])
@pytest.mark.parametrize("variables, got", [
    ({}, "nothing (no such variable)"),
    ({"items": None}, "null"),
    ({"items": 5}, "a number (5)"),
    ({"items": True}, "a boolean (True)"),
])
def test_a_multi_instance_over_a_bad_collection_fails_at_the_element_naming_it(
        script_engine, variables, got, sequential):
    xml = parallel_over(COLLECTION).replace("<bpmn:multiInstanceLoopCharacteristics>",
                                            f'<bpmn:multiInstanceLoopCharacteristics isSequential="{sequential}">')
    with pytest.raises(SpiffWorkflowException) as caught:
        run(xml, script_engine, **variables)
    failure = describe_failure(caught.value)
    assert failure["element_id"] == "each"
    assert failure["message"] == (f"The multi-instance collection 'items' must be a list or a dict; "
                                  f"it is {got}.")


@pytest.mark.parametrize("cardinality, got", [
    ('"abc"', "text ('abc')"),
    ("None", "null"),
    ("2.5", "a number (2.5)"),
    ("0 - 1", "a number (-1)"),
    ("2.0", "a number (2.0)"),
])
def test_a_parallel_multi_instance_with_a_bad_cardinality_fails_at_the_element_naming_it(
        script_engine, cardinality, got):
    xml = parallel_over(f"<bpmn:loopCardinality>{cardinality}</bpmn:loopCardinality>")
    with pytest.raises(SpiffWorkflowException) as caught:
        run(xml, script_engine)
    failure = describe_failure(caught.value)
    assert failure["element_id"] == "each"
    assert failure["message"] == (f"The multi-instance loopCardinality '{cardinality}' must give a whole "
                                  f"number from 0 up; it gave {got}.")


def test_a_good_collection_and_cardinality_still_run(script_engine):
    assert run(parallel_over(COLLECTION), script_engine, items=["a", "b"]).is_completed()
    assert run(parallel_over(COLLECTION), script_engine, items={"x": 1}).is_completed()
    assert run(parallel_over("<bpmn:loopCardinality>1 + 1</bpmn:loopCardinality>"), script_engine).is_completed()
    assert run(parallel_over("<bpmn:loopCardinality>0</bpmn:loopCardinality>"), script_engine).is_completed()


def test_a_call_activity_inside_a_subprocess_deploys_like_one_at_the_top():
    xml = HEADER + """<bpmn:process id="p" isExecutable="true">
  <bpmn:startEvent id="start" />
  <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="box" />
  <bpmn:subProcess id="box">
    <bpmn:startEvent id="box_start" />
    <bpmn:sequenceFlow id="b1" sourceRef="box_start" targetRef="call" />
    <bpmn:callActivity id="call" calledElement="other" />
    <bpmn:sequenceFlow id="b2" sourceRef="call" targetRef="box_end" />
    <bpmn:endEvent id="box_end" />
  </bpmn:subProcess>
  <bpmn:sequenceFlow id="f2" sourceRef="box" targetRef="end" />
  <bpmn:endEvent id="end" />
</bpmn:process></bpmn:definitions>"""
    parsed = deploy.parse_definition(xml)
    assert parsed.called_elements == ["other"]
    assert "box" in parsed.subprocess_specs
    assert "other" not in parsed.subprocess_specs  # the engine adds the deployed code's spec
