"""A message end or throw event whose definition names a Camunda implementation (camunda:expression,
class, delegateExpression, or type="external" with a topic) runs as Camunda runs it: an external
task, whose worker does the sending; Baton throws nothing by name for it. In memory."""
from __future__ import annotations

from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from tests.unit.bpmn.refusals import refusal
from tests.unit.bpmn.test_starts import definitions, process, workflow_of


def notifying(implementation: str) -> str:
    return definitions(process(f"""
      <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="notify" />
      <bpmn:intermediateThrowEvent id="notify">
        <bpmn:messageEventDefinition messageRef="M_paid" {implementation} /></bpmn:intermediateThrowEvent>
      <bpmn:sequenceFlow id="f2" sourceRef="notify" targetRef="done" />
      <bpmn:endEvent id="done"><bpmn:messageEventDefinition messageRef="M_order" {implementation} /></bpmn:endEvent>
    """))


def test_a_message_throw_with_camunda_expression_waits_for_a_worker_of_that_topic_then_goes_on(script_engine):
    parsed = deploy.parse_definition(notifying('camunda:expression="${mailer.send(execution)}"'))
    workflow = workflow_of(parsed, script_engine)
    workflow.do_engine_steps()

    assert [(t["element_id"], t["topic"]) for t in bpmn.waiting_external_tasks(workflow)] == [
        ("notify", "${mailer.send(execution)}")]
    for element_id in ("notify", "done"):
        [task] = workflow.get_tasks(state=TaskState.STARTED)
        assert task.task_spec.bpmn_id == element_id
        bpmn.complete_external_task(task, {f"{element_id}_sent": True})
        workflow.do_engine_steps()
    assert workflow.is_completed() and workflow.get_events() == []  # nothing thrown by name
    assert parsed.external_topics == ["${mailer.send(execution)}"]


def test_an_external_message_throw_without_a_topic_is_refused():
    errors = refusal(notifying('camunda:type="external"'))

    assert {e["element_id"] for e in errors} == {"notify", "done"}
    assert errors[0]["message"] == ('intermediateThrowEvent messageEventDefinition with camunda:type="external" '
                                    "needs a camunda:topic: the topic its workers fetch.")
