"""bpmn/: how processes start and talk: several start events, message start and throw events,
collaborations of pools, processes of the same file called, data inputs and outputs.

SpiffWorkflow 3.2 behaviour these rest on (measured here): with several start events it enters at
the first one of the file that does not wait (a message start waits; ``start_at`` chooses another);
a message throw that nothing in the instance catches is kept in ``workflow.get_events()``.
"""
from __future__ import annotations

import pytest
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from tests.unit.bpmn.refusals import refusal

HEADER = ('<?xml version="1.0" encoding="UTF-8"?>\n'
          '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
          'xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d">\n'
          '<bpmn:message id="M_order" name="order_placed" /><bpmn:message id="M_paid" name="paid" />\n')


def definitions(body: str) -> str:
    return HEADER + body + "</bpmn:definitions>"


def process(body: str, pid: str = "p", executable: str = "true") -> str:
    return f'<bpmn:process id="{pid}" isExecutable="{executable}">{body}</bpmn:process>'


def workflow_of(parsed: deploy.ParsedDefinition, engine) -> BpmnWorkflow:
    spec, subprocess_specs = bpmn.load_spec(parsed.spec_json)
    return BpmnWorkflow(spec, subprocess_specs, script_engine=engine)


STARTS_BODY = ("""
  <bpmn:startEvent id="by_hand" />
  <bpmn:startEvent id="by_hook"><bpmn:extensionElements><camunda:properties>
    <camunda:property name="trigger" value="webhook" /></camunda:properties></bpmn:extensionElements></bpmn:startEvent>
  <bpmn:startEvent id="on_order"><bpmn:messageEventDefinition messageRef="M_order" /></bpmn:startEvent>
  <bpmn:startEvent id="nightly"><bpmn:timerEventDefinition><bpmn:timeCycle>0 0 2 * * ?</bpmn:timeCycle>
    </bpmn:timerEventDefinition></bpmn:startEvent>
  <bpmn:sequenceFlow id="f1" sourceRef="by_hand" targetRef="a" />
  <bpmn:sequenceFlow id="f2" sourceRef="by_hook" targetRef="b" />
  <bpmn:sequenceFlow id="f3" sourceRef="on_order" targetRef="c" />
  <bpmn:sequenceFlow id="f4" sourceRef="nightly" targetRef="d" />
  <bpmn:scriptTask id="a"><bpmn:script>came = "hand"</bpmn:script></bpmn:scriptTask>
  <bpmn:scriptTask id="b"><bpmn:script>came = "hook"</bpmn:script></bpmn:scriptTask>
  <bpmn:scriptTask id="c"><bpmn:script>came = "order " + str(number)</bpmn:script></bpmn:scriptTask>
  <bpmn:scriptTask id="d"><bpmn:script>came = "night"</bpmn:script></bpmn:scriptTask>
  <bpmn:sequenceFlow id="f5" sourceRef="a" targetRef="end" /><bpmn:sequenceFlow id="f6" sourceRef="b" targetRef="end" />
  <bpmn:sequenceFlow id="f7" sourceRef="c" targetRef="end" /><bpmn:sequenceFlow id="f8" sourceRef="d" targetRef="end" />
  <bpmn:endEvent id="end" />""")
STARTS = process(STARTS_BODY)


def test_several_start_events_each_with_its_own_trigger_deploy_and_each_can_begin(script_engine):
    parsed = deploy.parse_definition(definitions(STARTS))
    assert [(s.element_id, s.trigger, s.message) for s in parsed.start_events] == [
        ("by_hand", None, None), ("by_hook", "webhook", None), ("on_order", "message", "order_placed"),
        ("nightly", "timer", None)]
    assert parsed.default_start == "by_hand"
    assert [t.kind for t in parsed.timer_starts] == ["cron"]
    for chosen, expected in (("by_hand", "hand"), ("by_hook", "hook"), ("nightly", "night")):
        workflow = workflow_of(parsed, script_engine)
        bpmn.start_at(workflow, chosen)
        workflow.do_engine_steps()
        assert workflow.is_completed() and workflow.data["came"] == expected
    workflow = workflow_of(parsed, script_engine)  # what process.start does without start_at
    workflow.do_engine_steps()
    assert workflow.data["came"] == "hand"


def test_a_message_start_event_waits_for_its_message_with_the_variables(script_engine):
    parsed = deploy.parse_definition(definitions(STARTS))
    workflow = workflow_of(parsed, script_engine)
    bpmn.start_at(workflow, "on_order")
    workflow.do_engine_steps()
    assert not workflow.is_completed()
    workflow.send_event(bpmn.message_event("order_placed", {"number": 42}))
    workflow.do_engine_steps()
    assert workflow.is_completed() and workflow.data["came"] == "order 42"


@pytest.mark.parametrize("second, phrase", [
    ('<bpmn:startEvent id="again" />', "2 start events without a trigger, which process.start would choose between "
                                       "('by_hand', 'again')"),
    ('<bpmn:startEvent id="again"><bpmn:messageEventDefinition messageRef="M_order" /></bpmn:startEvent>',
     "2 start events for the message 'order_placed' ('on_order', 'again')"),
])
def test_two_start_events_that_the_same_trigger_would_start_are_refused(second, phrase):
    xml = definitions(STARTS.replace('<bpmn:endEvent id="end" />', f'<bpmn:endEvent id="end" />{second}'
                                     '<bpmn:sequenceFlow id="f9" sourceRef="again" targetRef="end" />'))
    [error] = refusal(xml)
    assert error["element_id"] == "again"
    assert phrase in error["message"]


THROWER = """
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="t1" sourceRef="s" targetRef="notify" />
  <bpmn:sendTask id="notify" messageRef="M_order" /><bpmn:sequenceFlow id="t2" sourceRef="notify" targetRef="tell" />
  <bpmn:intermediateThrowEvent id="tell"><bpmn:messageEventDefinition messageRef="M_paid" /></bpmn:intermediateThrowEvent>
  <bpmn:sequenceFlow id="t3" sourceRef="tell" targetRef="done" />
  <bpmn:endEvent id="done"><bpmn:messageEventDefinition messageRef="M_paid" /></bpmn:endEvent>"""


def test_message_throws_leave_their_messages_with_the_variables_for_the_engine(script_engine):
    parsed = deploy.parse_definition(definitions(process(THROWER)))
    assert parsed.throws == ["order_placed", "paid"] and parsed.messages == []
    workflow = workflow_of(parsed, script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data["number"] = 5
    workflow.do_engine_steps()
    assert workflow.is_completed()
    events = workflow.get_events()
    assert [(e.event_definition.name, e.payload) for e in events] == [
        ("order_placed", {"number": 5}), ("paid", {"number": 5}), ("paid", {"number": 5})]


def test_a_collaboration_parses_into_one_definition_per_pool_and_one_file_refuses_it():
    xml = definitions('<bpmn:collaboration id="c"><bpmn:participant id="pa" processRef="shop" />'
                      '<bpmn:participant id="pb" processRef="warehouse" />'
                      '<bpmn:messageFlow id="mf" sourceRef="notify" targetRef="on_order" /></bpmn:collaboration>'
                      + process(THROWER, "shop") + process(STARTS_BODY, "warehouse"))
    shop, warehouse = deploy.parse_definitions(xml)
    assert (shop.process_id, shop.throws) == ("shop", ["order_placed", "paid"])
    assert (warehouse.process_id, warehouse.start_events[2].message) == ("warehouse", "order_placed")
    [error] = refusal(xml)  # parse_definition: one process per definition
    assert "The file has 2 executable processes ('shop', 'warehouse'); deploy it as a collaboration" in error["message"]


def test_a_process_of_the_same_file_is_called_inside_the_definition(script_engine):
    xml = definitions(process("""
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="c1" sourceRef="s" targetRef="call" />
  <bpmn:callActivity id="call" calledElement="tax" /><bpmn:sequenceFlow id="c2" sourceRef="call" targetRef="e" />
  <bpmn:endEvent id="e" />""") + process("""
  <bpmn:startEvent id="ts" /><bpmn:sequenceFlow id="x1" sourceRef="ts" targetRef="compute" />
  <bpmn:scriptTask id="compute"><bpmn:script>tax = net * 0.2</bpmn:script></bpmn:scriptTask>
  <bpmn:sequenceFlow id="x2" sourceRef="compute" targetRef="te" /><bpmn:endEvent id="te" />""", "tax", "false"))
    parsed = deploy.parse_definition(xml)
    assert parsed.called_elements == [] and "tax" in parsed.subprocess_specs
    workflow = workflow_of(parsed, script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data["net"] = 100
    workflow.do_engine_steps()
    assert workflow.is_completed() and workflow.data["tax"] == 20.0


IO_TASK = """
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="i1" sourceRef="s" targetRef="calc" />
  <bpmn:scriptTask id="calc">
    <bpmn:ioSpecification>
      <bpmn:dataInput id="net" /><bpmn:dataOutput id="gross" />
      <bpmn:inputSet><bpmn:dataInputRefs>net</bpmn:dataInputRefs></bpmn:inputSet>
      <bpmn:outputSet><bpmn:dataOutputRefs>gross</bpmn:dataOutputRefs></bpmn:outputSet>
    </bpmn:ioSpecification>
    <bpmn:property id="Property_1" name="__targetRef_placeholder" />
    <bpmn:script>seen = sorted(locals_seen) if False else None
gross = net * 1.2
scratch = 1</bpmn:script>
  </bpmn:scriptTask>
  <bpmn:sequenceFlow id="i2" sourceRef="calc" targetRef="e" /><bpmn:endEvent id="e" />
  <bpmn:dataObject id="DataObject_1" /><bpmn:dataObjectReference id="ref" dataObjectRef="DataObject_1" />"""


def test_an_io_specification_runs_as_spiffworkflow_runs_it(script_engine):
    parsed = deploy.parse_definition(definitions(process(IO_TASK)))
    workflow = workflow_of(parsed, script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(net=100, other="dropped")
    workflow.do_engine_steps()
    assert workflow.is_completed()
    assert workflow.data == {"gross": 120.0}  # the task saw its inputs and passed on only its outputs


def test_an_io_specification_whose_ids_are_not_variable_names_is_refused():
    [error] = refusal(definitions(process(IO_TASK.replace('"net"', '"_d0-96"').replace(">net<", ">_d0-96<"))))
    assert error["element_id"] == "calc"
    assert "ioSpecification dataInput '_d0-96' must have a variable name as its id" in error["message"]


CORRELATED = ('<bpmn:collaboration id="c"><bpmn:participant id="pa" processRef="buyer" />'
              '<bpmn:participant id="pb" processRef="seller" /><bpmn:correlationKey name="order">'
              "<bpmn:correlationPropertyRef>order_id</bpmn:correlationPropertyRef></bpmn:correlationKey>"
              "</bpmn:collaboration>"
              '<bpmn:correlationProperty id="order_id" name="Order">'
              '<bpmn:correlationPropertyRetrievalExpression messageRef="M_order">'
              "<bpmn:formalExpression>number</bpmn:formalExpression></bpmn:correlationPropertyRetrievalExpression>"
              '<bpmn:correlationPropertyRetrievalExpression messageRef="M_paid">'
              "<bpmn:formalExpression>reply['order']</bpmn:formalExpression>"
              "</bpmn:correlationPropertyRetrievalExpression></bpmn:correlationProperty>")


def test_correlation_properties_are_recorded_per_message_for_the_engine():
    buyer = THROWER.replace('<bpmn:endEvent id="done"><bpmn:messageEventDefinition messageRef="M_paid" />'
                            "</bpmn:endEvent>", '<bpmn:endEvent id="done" />').replace(
        '<bpmn:intermediateThrowEvent id="tell"><bpmn:messageEventDefinition messageRef="M_paid" />'
        "</bpmn:intermediateThrowEvent>", '<bpmn:intermediateCatchEvent id="tell"><bpmn:messageEventDefinition '
                                          'messageRef="M_paid" /></bpmn:intermediateCatchEvent>')
    shop, warehouse = deploy.parse_definitions(definitions(CORRELATED + process(buyer, "buyer")
                                                         + process(STARTS_BODY, "seller")))
    assert shop.correlations == {"order_placed": {"order_id": "number"}, "paid": {"order_id": "reply['order']"}}
    assert warehouse.correlations == {"order_placed": {"order_id": "number"}}


def test_a_correlation_expression_the_sandbox_refuses_is_refused_at_its_line():
    xml = definitions(CORRELATED.replace("reply['order']", "reply.__class__") + process(STARTS_BODY, "seller"))
    [error] = refusal(xml)
    assert error["element_id"] == "order_id"
    assert error["message"] == ("correlationProperty 'order_id' expression 'reply.__class__' cannot run: access to "
                                "'.__class__' is not allowed.")
