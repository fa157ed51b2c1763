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
from bpmn import deploy
from tests.unit.bpmn.refusals import refusal

HEADER = ('<?xml version="1.0" encoding="UTF-8"?>\n'
          '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
          'xmlns:camunda="http://camunda.org/schema/1.0/bpmn" '
          'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d">\n')


def model(body: str) -> str:
    return HEADER + f'<bpmn:process id="p" isExecutable="true">{body}</bpmn:process></bpmn:definitions>'


def run(xml: str, engine, **variables) -> BpmnWorkflow:
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(xml).spec_json)
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
    stored = deploy.parse_definition(xml).spec_json
    assert "${" not in stored and "&&" not in stored  # the spec holds Python, not JUEL
    assert run(xml, script_engine, amount=150, customer={"tier": "gold"}, approved=True).data["outcome"] == "approved"
    assert run(xml, script_engine, amount=50, customer={"tier": "gold"}, approved=False).data["outcome"] == "rejected"


def test_an_untranslatable_condition_is_refused_naming_the_construct_element_and_line():
    [error] = refusal(gateway("${customer.age(\"years\") &gt;= 21}", "${true}"))
    assert error["element_id"] == "yes"
    assert error["line"] == 9  # the conditionExpression
    assert error["message"] == (
        "sequenceFlow condition '${customer.age(\"years\") >= 21}' cannot be translated from JUEL: "
        "the method call age(...) at position 12 is outside the subset Baton translates; write it as a "
        "Python expression, such as amount > 100.")


def test_camunda_spins_json_reading_methods_route_on_a_json_variable(script_engine):
    xml = gateway("${customer.prop(\"age\").numberValue() &gt;= 21}", "${true}")

    older = run(xml, script_engine, customer={"age": 30})
    younger = run(xml, script_engine, customer={"age": 17})

    assert (older.data["outcome"], younger.data["outcome"]) == ("approved", "rejected")


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


# -- external tasks -------------------------------------------------------------------------------

def one_task(attributes: str, extensions: str = "", tag: str = "serviceTask", boundary: str = "") -> str:
    return model(f"""
  <bpmn:startEvent id="start" />
  <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work" />
  <bpmn:{tag} id="work" {attributes}>{extensions}</bpmn:{tag}>
  <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="end" />
  <bpmn:endEvent id="end" />{boundary}""")


@pytest.mark.parametrize("attributes, extensions, topic, source", [
    ('camunda:type="external" camunda:topic="invoiceCreator"', "", "invoiceCreator", "camunda:topic"),
    ('camunda:class="org.example.SendInvoice"', "", "org.example.SendInvoice", "camunda:class"),
    ('camunda:delegateExpression="${sendInvoice}"', "", "${sendInvoice}", "camunda:delegateExpression"),
    ('camunda:expression="#{mailer.send(order)}"', "", "#{mailer.send(order)}", "camunda:expression"),
    ("", '<bpmn:extensionElements><zeebe:taskDefinition type="payment-service" /></bpmn:extensionElements>',
     "payment-service", "zeebe:taskDefinition"),
    ("", "", "work", "id"),
])
def test_a_service_task_without_an_operator_is_an_external_task_with_a_topic(attributes, extensions, topic, source):
    parsed = deploy.parse_definition(one_task(attributes, extensions))
    assert parsed.external_topics == [topic]
    spec = bpmn.load_spec(parsed.spec_json)[0].task_specs["work"]  # stored with the spec
    assert spec.extensions["external"] == {"topic": topic, "source": source, "element": "serviceTask"}
    assert "operator" not in spec.extensions


def test_a_send_task_without_a_message_is_an_external_task_too():
    parsed = deploy.parse_definition(one_task('camunda:class="org.example.Notify"', tag="sendTask"))
    assert parsed.external_topics == ["org.example.Notify"]


def test_an_external_task_parks_until_its_worker_completes_it(script_engine):
    xml = one_task('camunda:type="external" camunda:topic="invoiceCreator"')
    workflow = run(xml, script_engine, order=7)
    [waiting] = bpmn.waiting_external_tasks(workflow)
    assert waiting["element_id"] == "work" and waiting["topic"] == "invoiceCreator"
    workflow = bpmn.workflow_from_json(bpmn.workflow_to_json(workflow), workflow.spec,
                                       workflow.subprocess_specs, script_engine)  # saved between advances
    task = workflow.get_task_from_id(__import__("uuid").UUID(waiting["spiff_task_id"]))
    assert task.state == TaskState.STARTED
    workflow.do_engine_steps()  # nothing moves without the worker
    assert task.state == TaskState.STARTED
    bpmn.complete_external_task(task, {"invoice": "INV-7"})
    workflow.do_engine_steps()
    assert workflow.is_completed() and workflow.data == {"order": 7, "invoice": "INV-7"}
    assert bpmn.waiting_external_tasks(workflow) == []


ERROR_BOUNDARY = """
  <bpmn:boundaryEvent id="failed" attachedToRef="work"><bpmn:errorEventDefinition errorRef="E1" /></bpmn:boundaryEvent>
  <bpmn:sequenceFlow id="f3" sourceRef="failed" targetRef="handle" />
  <bpmn:scriptTask id="handle"><bpmn:script>handled = reason</bpmn:script></bpmn:scriptTask>
  <bpmn:sequenceFlow id="f4" sourceRef="handle" targetRef="end" />"""


def test_a_workers_bpmn_error_reaches_the_error_boundary_of_the_external_task(script_engine):
    xml = one_task('camunda:type="external" camunda:topic="pay"', boundary=ERROR_BOUNDARY).replace(
        '<bpmn:process id="p"', '<bpmn:error id="E1" errorCode="CARD_DECLINED" /><bpmn:process id="p"')
    workflow = run(xml, script_engine)
    [task] = [t for t in workflow.get_tasks(state=TaskState.STARTED) if t.task_spec.bpmn_id == "work"]
    assert bpmn.throw_bpmn_error(task, "OTHER_CODE") is False
    assert task.state == TaskState.STARTED  # nothing caught it: nothing changed
    assert bpmn.throw_bpmn_error(task, "CARD_DECLINED", "declined", {"reason": "expired"}) is True
    workflow.do_engine_steps()
    assert workflow.is_completed()
    assert task.state == TaskState.CANCELLED
    assert workflow.data["handled"] == "expired"


def test_an_external_task_without_a_topic_is_refused():
    [error] = refusal(one_task('camunda:type="external"'))
    assert error["element_id"] == "work"
    assert error["message"] == ('serviceTask with camunda:type="external" needs a camunda:topic: the topic its '
                                "workers fetch.")


@pytest.mark.parametrize("extensions, phrase", [
    ('<camunda:executionListener class="org.example.Audit" event="start" />',
     "serviceTask with camunda:executionListener (class org.example.Audit) is not supported: Baton runs no "
     "listener code"),
    ("<camunda:connector><camunda:connectorId>http-connector</camunda:connectorId></camunda:connector>",
     "serviceTask with camunda:connector (http-connector) is not supported: for an HTTP call give it the "
     "properties operator = http"),
    ('<camunda:inputOutput><camunda:inputParameter name="a"><camunda:script scriptFormat="groovy">1'
     "</camunda:script></camunda:inputParameter></camunda:inputOutput>",
     "serviceTask camunda:inputOutput with a groovy script (camunda:inputParameter 'a') is code Baton does not run"),
])
def test_camunda_extensions_that_carry_code_are_refused_saying_what_to_do(extensions, phrase):
    [error] = refusal(one_task('camunda:class="A"', f"<bpmn:extensionElements>{extensions}</bpmn:extensionElements>"))
    assert error["element_id"] == "work"
    assert error["line"] == 6
    assert phrase in error["message"]


def test_groovy_and_javascript_scripts_say_what_to_change():
    xml = model("""
  <bpmn:startEvent id="start" />
  <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="calc" />
  <bpmn:scriptTask id="calc" scriptFormat="groovy"><bpmn:script>x = 1</bpmn:script></bpmn:scriptTask>
  <bpmn:sequenceFlow id="f2" sourceRef="calc" targetRef="end" />
  <bpmn:endEvent id="end" />""")
    [error] = refusal(xml)
    assert (error["element_id"], error["line"]) == ("calc", 6)
    assert error["message"] == ("scriptTask scriptFormat 'groovy' is not supported; scripts are Python: rewrite it "
                                "in Python (Baton runs it in its sandbox), or make the element a serviceTask "
                                "that an external worker completes.")


def test_call_activity_mappings_that_pass_no_more_than_every_variable_are_accepted():
    xml = one_task('calledElement="billing"', "<bpmn:extensionElements>"
                   '<camunda:in source="order" target="order" /><camunda:in businessKey="#{key}" />'
                   '<camunda:out variables="all" /></bpmn:extensionElements>', tag="callActivity")
    assert deploy.parse_definition(xml).called_elements == ["billing"]
    [error] = refusal(xml.replace('target="order"', 'target="renamed"'))
    assert "camunda:in variable mappings is not supported yet" in error["message"]


# -- Camunda 8 (Zeebe) --------------------------------------------------------------------------------

ZEEBE_MODEL = model("""
  <bpmn:startEvent id="start" />
  <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="each" />
  <bpmn:scriptTask id="each">
    <bpmn:multiInstanceLoopCharacteristics>
      <bpmn:extensionElements>
        <zeebe:loopCharacteristics inputCollection="= items" inputElement="item"
                                   outputCollection="doubled" outputElement="= result" />
      </bpmn:extensionElements>
    </bpmn:multiInstanceLoopCharacteristics>
    <bpmn:script>result = item * 2</bpmn:script>
  </bpmn:scriptTask>
  <bpmn:sequenceFlow id="f2" sourceRef="each" targetRef="g" />
  <bpmn:exclusiveGateway id="g" default="small" />
  <bpmn:sequenceFlow id="big" sourceRef="g" targetRef="pay"><bpmn:conditionExpression>= count(doubled) &gt; 1
    </bpmn:conditionExpression></bpmn:sequenceFlow>
  <bpmn:sequenceFlow id="small" sourceRef="g" targetRef="pay" />
  <bpmn:serviceTask id="pay"><bpmn:extensionElements><zeebe:taskDefinition type="payment" />
    </bpmn:extensionElements></bpmn:serviceTask>
  <bpmn:sequenceFlow id="f3" sourceRef="pay" targetRef="sub" />
  <bpmn:callActivity id="sub"><bpmn:extensionElements><zeebe:calledElement processId="billing" />
    </bpmn:extensionElements></bpmn:callActivity>
  <bpmn:sequenceFlow id="f4" sourceRef="sub" targetRef="end" />
  <bpmn:endEvent id="end" />""")


def test_a_camunda_8_model_names_what_feel_it_cannot_translate():
    [error] = refusal(ZEEBE_MODEL)
    assert error["element_id"] == "big"
    assert "cannot be translated from FEEL: the function call count(...)" in error["message"]


def test_a_camunda_8_model_runs_its_zeebe_loop_task_type_and_called_process(script_engine):
    xml = ZEEBE_MODEL.replace("= count(doubled) &gt; 1", "= doubled[1] &gt; 2")
    parsed = deploy.parse_definition(xml)
    assert parsed.external_topics == ["payment"] and parsed.called_elements == ["billing"]
    workflow = run(xml, script_engine, items=[1, 2])
    [waiting] = bpmn.waiting_external_tasks(workflow)
    assert waiting["topic"] == "payment"
    assert workflow.get_task_from_id(__import__("uuid").UUID(waiting["spiff_task_id"])).data["doubled"] == [2, 4]


def test_zeebe_io_mappings_are_refused_saying_what_to_do():
    [error] = refusal(one_task("", '<bpmn:extensionElements><zeebe:ioMapping><zeebe:input source="= a" target="b" />'
                                   "</zeebe:ioMapping></bpmn:extensionElements>"))
    assert error["message"].startswith("serviceTask with zeebe:ioMapping (input/output mappings) is not supported yet")
