"""bpmn/events.py: what an instance throws for other instances (messages with their correlation
values, signals), and signals caught with their variables, in memory with the sandboxed engine."""
from __future__ import annotations

from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from bpmn.events import thrown_events
from tests.unit.bpmn.refusals import refusal
from tests.unit.bpmn.test_starts import definitions, process, workflow_of

SIGNALS = ('<bpmn:signal id="S_alarm" name="alarm" />'
           '<bpmn:signal id="S_quiet" />')
BROADCASTER = process("""
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="split" />
  <bpmn:parallelGateway id="split" />
  <bpmn:sequenceFlow id="f2" sourceRef="split" targetRef="listen" />
  <bpmn:sequenceFlow id="f3" sourceRef="split" targetRef="shout" />
  <bpmn:intermediateCatchEvent id="listen"><bpmn:signalEventDefinition signalRef="S_alarm" /></bpmn:intermediateCatchEvent>
  <bpmn:sequenceFlow id="f4" sourceRef="listen" targetRef="heard" />
  <bpmn:endEvent id="heard" />
  <bpmn:intermediateThrowEvent id="shout"><bpmn:signalEventDefinition signalRef="S_alarm" /></bpmn:intermediateThrowEvent>
  <bpmn:sequenceFlow id="f5" sourceRef="shout" targetRef="done" />
  <bpmn:endEvent id="done"><bpmn:signalEventDefinition signalRef="S_quiet" /></bpmn:endEvent>""")


def test_a_thrown_signal_reaches_its_own_catchers_and_is_handed_to_the_engine_for_the_others(script_engine):
    parsed = deploy.parse_definition(definitions(SIGNALS + BROADCASTER))
    workflow = workflow_of(parsed, script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data["level"] = 3
    workflow.do_engine_steps()
    assert workflow.is_completed()  # the catch in its own instance got it
    assert thrown_events(workflow.get_events()) == [
        {"kind": "signal", "name": "alarm", "variables": {"level": 3}, "correlation": {}, "element_id": "shout",
         "undelivered": "fail"},
        {"kind": "signal", "name": "S_quiet", "variables": {"level": 3}, "correlation": {}, "element_id": "done",
         "undelivered": "fail"}]


SIGNAL_START = process("""
  <bpmn:startEvent id="by_hand" /><bpmn:sequenceFlow id="f0" sourceRef="by_hand" targetRef="wait" />
  <bpmn:startEvent id="on_alarm"><bpmn:signalEventDefinition signalRef="S_alarm" /></bpmn:startEvent>
  <bpmn:sequenceFlow id="f1" sourceRef="on_alarm" targetRef="e" />
  <bpmn:userTask id="wait" /><bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="e" />
  <bpmn:boundaryEvent id="stop" attachedToRef="wait"><bpmn:signalEventDefinition signalRef="S_quiet" />
  </bpmn:boundaryEvent><bpmn:sequenceFlow id="f3" sourceRef="stop" targetRef="stopped" />
  <bpmn:endEvent id="stopped" /><bpmn:endEvent id="e" />""")


def test_a_signal_start_event_and_a_signal_boundary_event_catch_by_name_with_the_variables(script_engine):
    parsed = deploy.parse_definition(definitions(SIGNALS + SIGNAL_START))
    assert [(s.element_id, s.trigger, s.signal) for s in parsed.start_events] == [
        ("by_hand", None, None), ("on_alarm", "signal", "alarm")]
    started = workflow_of(parsed, script_engine)
    bpmn.start_at(started, "on_alarm")
    started.do_engine_steps()
    started.send_event(bpmn.signal_event("alarm", {"level": 9}))
    started.do_engine_steps()
    assert started.is_completed() and started.data == {"level": 9}
    waiting = workflow_of(parsed, script_engine)
    bpmn.start_at(waiting, "by_hand")
    waiting.do_engine_steps()
    waiting.send_event(bpmn.signal_event("S_quiet", {"why": "closing"}))
    waiting.do_engine_steps()
    assert waiting.is_completed() and waiting.data == {"why": "closing"}
    assert [t.task_spec.bpmn_id for t in waiting.get_tasks(state=TaskState.COMPLETED)
            if t.task_spec.bpmn_id in ("stopped", "e")] == ["stopped"]


def test_a_signal_reference_to_nothing_is_refused():
    xml = definitions(BROADCASTER.replace('signalRef="S_quiet"', 'signalRef="S_gone"'))
    assert any(e["element_id"] == "done" and e["message"] == "endEvent signalRef 'S_gone' names no bpmn:signal of "
               "this file." for e in refusal(xml))


CORRELATED = ('<bpmn:correlationProperty id="order_id" name="Order">'
              '<bpmn:correlationPropertyRetrievalExpression messageRef="M_order">'
              "<bpmn:formalExpression>number</bpmn:formalExpression></bpmn:correlationPropertyRetrievalExpression>"
              "</bpmn:correlationProperty>")
SENDER = process("""
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="t1" sourceRef="s" targetRef="notify" />
  <bpmn:sendTask id="notify" messageRef="M_order">
    <bpmn:extensionElements><camunda:properties><camunda:property name="undelivered" value="drop" />
    </camunda:properties></bpmn:extensionElements></bpmn:sendTask>
  <bpmn:sequenceFlow id="t2" sourceRef="notify" targetRef="reply" />
  <bpmn:receiveTask id="reply" messageRef="M_paid" /><bpmn:sequenceFlow id="t3" sourceRef="reply" targetRef="e" />
  <bpmn:endEvent id="e" />""")


def test_a_thrown_message_carries_its_correlation_values_and_the_instance_keeps_them(script_engine):
    parsed = deploy.parse_definition(definitions(CORRELATED + SENDER))
    workflow = workflow_of(parsed, script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data["number"] = 7
    workflow.do_engine_steps()
    assert thrown_events(workflow.get_events()) == [
        {"kind": "message", "name": "order_placed", "variables": {"number": 7}, "correlation": {"order_id": 7},
         "element_id": "notify", "undelivered": "drop"}]
    assert workflow.correlations == {"order_id": 7}
    workflow.send_event(bpmn.message_event("paid", {"total": 10}, {"order_id": 7}))
    workflow.do_engine_steps()
    assert workflow.is_completed() and workflow.data == {"number": 7, "total": 10}


def test_an_undelivered_policy_other_than_fail_or_drop_is_refused():
    xml = definitions(SENDER.replace('value="drop"', 'value="retry"'))
    [error] = refusal(xml)
    assert error["element_id"] == "notify"
    assert error["message"].startswith("sendTask undelivered 'retry' must be fail (the default")
