"""Transaction subprocesses: they run as embedded subprocesses; a cancel end event inside ends the
transaction and its cancel boundary event's path runs (compensation stays refused); in memory."""
from __future__ import annotations

from SpiffWorkflow.util.task import TaskState

from bpmn import deploy
from tests.unit.bpmn.refusals import refusal
from tests.unit.bpmn.test_starts import definitions, process, workflow_of

BOOKING = process("""
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="booking" />
  <bpmn:transaction id="booking">
    <bpmn:startEvent id="bs" /><bpmn:sequenceFlow id="b1" sourceRef="bs" targetRef="reserve" />
    <bpmn:userTask id="reserve" /><bpmn:sequenceFlow id="b2" sourceRef="reserve" targetRef="ok" />
    <bpmn:exclusiveGateway id="ok" default="b4" />
    <bpmn:sequenceFlow id="b3" sourceRef="ok" targetRef="cancelled"><bpmn:conditionExpression>${!paid}</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:sequenceFlow id="b4" sourceRef="ok" targetRef="be" /><bpmn:endEvent id="be" />
    <bpmn:endEvent id="cancelled"><bpmn:cancelEventDefinition /></bpmn:endEvent>
  </bpmn:transaction>
  <bpmn:sequenceFlow id="f2" sourceRef="booking" targetRef="booked" /><bpmn:endEvent id="booked" />
  <bpmn:boundaryEvent id="on_cancel" attachedToRef="booking"><bpmn:cancelEventDefinition /></bpmn:boundaryEvent>
  <bpmn:sequenceFlow id="f3" sourceRef="on_cancel" targetRef="refund" />
  <bpmn:userTask id="refund" /><bpmn:sequenceFlow id="f4" sourceRef="refund" targetRef="refunded" />
  <bpmn:endEvent id="refunded" />""")


def after_reserving(engine, paid: bool):
    workflow = workflow_of(deploy.parse_definition(definitions(BOOKING)), engine)
    workflow.do_engine_steps()
    [reserve] = workflow.get_tasks(state=TaskState.READY)
    reserve.data["paid"] = paid
    reserve.run()
    workflow.do_engine_steps()
    return workflow


def test_a_transaction_that_ends_normally_goes_on_along_its_outgoing_flow(script_engine):
    assert after_reserving(script_engine, paid=True).is_completed()


def test_a_cancel_end_event_ends_the_transaction_and_its_cancel_boundary_path_runs(script_engine):
    workflow = after_reserving(script_engine, paid=False)

    assert [t.task_spec.bpmn_id for t in workflow.get_tasks(state=TaskState.READY)] == ["refund"]


def test_cancel_events_outside_a_transaction_and_compensation_are_refused_naming_why():
    misplaced = process("""
      <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="work" />
      <bpmn:userTask id="work" /><bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="stop" />
      <bpmn:endEvent id="stop"><bpmn:cancelEventDefinition /></bpmn:endEvent>
      <bpmn:boundaryEvent id="undo" attachedToRef="work"><bpmn:cancelEventDefinition /></bpmn:boundaryEvent>
      <bpmn:sequenceFlow id="f3" sourceRef="undo" targetRef="e" /><bpmn:endEvent id="e" />""")
    compensating = BOOKING.replace('<bpmn:userTask id="reserve" />',
                                   '<bpmn:userTask id="reserve" isForCompensation="true" />')

    errors = {(e["element_id"], e["message"]) for e in refusal(definitions(misplaced))}
    [compensation] = refusal(definitions(compensating))

    assert ("stop", "A cancel endEvent cancels the transaction it is in; this one is in a process.") in errors
    assert ("undo", "A cancel boundaryEvent catches the cancel end event of a transaction; 'work' is a userTask.") \
        in errors
    assert compensation["message"] == "userTask with isForCompensation is not supported yet."
