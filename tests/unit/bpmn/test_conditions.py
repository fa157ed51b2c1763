"""Conditional boundary and catch events: the condition (JUEL, FEEL or Python, translated at deploy)
is checked again after each step, a variable it names that does not exist yet keeps it false, and
a boundary's path runs once it holds; in memory with the sandboxed engine."""
from __future__ import annotations

from SpiffWorkflow.util.task import TaskState

from bpmn import deploy, refresh_conditions
from tests.unit.bpmn.refusals import refusal
from tests.unit.bpmn.test_starts import definitions, process, workflow_of

WATCHED = process("""
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="work" />
  <bpmn:userTask id="work" /><bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="done" />
  <bpmn:endEvent id="done" />
  <bpmn:boundaryEvent id="archived" attachedToRef="work" cancelActivity="false">
    <bpmn:conditionalEventDefinition><bpmn:condition>${invoiceId != null}</bpmn:condition></bpmn:conditionalEventDefinition>
  </bpmn:boundaryEvent>
  <bpmn:sequenceFlow id="f3" sourceRef="archived" targetRef="archive" />
  <bpmn:scriptTask id="archive"><bpmn:script>archived_id = invoiceId</bpmn:script></bpmn:scriptTask>
  <bpmn:sequenceFlow id="f4" sourceRef="archive" targetRef="gone" /><bpmn:endEvent id="gone" />""")


def waiting_ids(workflow) -> list[str]:
    return sorted(t.task_spec.bpmn_id for t in workflow.get_tasks(state=TaskState.READY | TaskState.WAITING)
                  if t.task_spec.bpmn_id)


def test_a_conditional_boundary_waits_while_its_variable_is_missing_then_fires_when_it_holds(script_engine):
    workflow = workflow_of(deploy.parse_definition(definitions(WATCHED)), script_engine)
    workflow.do_engine_steps()
    assert not refresh_conditions(workflow)  # invoiceId does not exist yet: not true, no error
    assert waiting_ids(workflow) == ["archived", "work"]

    [work] = workflow.get_tasks(state=TaskState.READY)
    work.data["invoiceId"] = "INV-7"  # the activity's variables change (a message, set variables ...)
    assert refresh_conditions(workflow)
    workflow.do_engine_steps()

    assert waiting_ids(workflow) == ["work"]  # non-interrupting: the task goes on
    assert any(t.task_spec.bpmn_id == "archive" and t.data["archived_id"] == "INV-7"
               for t in workflow.get_tasks(state=TaskState.COMPLETED))


CATCH = process("""
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="until" />
  <bpmn:intermediateCatchEvent id="until">
    <bpmn:conditionalEventDefinition><bpmn:condition>= stock &gt; 10</bpmn:condition></bpmn:conditionalEventDefinition>
  </bpmn:intermediateCatchEvent>
  <bpmn:sequenceFlow id="f2" sourceRef="until" targetRef="e" /><bpmn:endEvent id="e" />""")


IN_SUBPROCESS = process("""
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="order" />
  <bpmn:subProcess id="order">
    <bpmn:startEvent id="os" /><bpmn:sequenceFlow id="o1" sourceRef="os" targetRef="invoice" />
    <bpmn:scriptTask id="invoice"><bpmn:script>invoiceId = "INV-9"</bpmn:script></bpmn:scriptTask>
    <bpmn:sequenceFlow id="o2" sourceRef="invoice" targetRef="ship" />
    <bpmn:userTask id="ship" /><bpmn:sequenceFlow id="o3" sourceRef="ship" targetRef="oe" /><bpmn:endEvent id="oe" />
  </bpmn:subProcess>
  <bpmn:sequenceFlow id="f2" sourceRef="order" targetRef="done" /><bpmn:endEvent id="done" />
  <bpmn:boundaryEvent id="invoiced" attachedToRef="order">
    <bpmn:conditionalEventDefinition><bpmn:condition>${invoiceId != null}</bpmn:condition></bpmn:conditionalEventDefinition>
  </bpmn:boundaryEvent>
  <bpmn:sequenceFlow id="f3" sourceRef="invoiced" targetRef="archive" />
  <bpmn:scriptTask id="archive"><bpmn:script>archived_id = invoiceId</bpmn:script></bpmn:scriptTask>
  <bpmn:sequenceFlow id="f4" sourceRef="archive" targetRef="gone" /><bpmn:endEvent id="gone" />""")


def test_an_interrupting_conditional_boundary_sees_what_its_subprocess_set_and_carries_it_on(script_engine):
    workflow = workflow_of(deploy.parse_definition(definitions(IN_SUBPROCESS)), script_engine)
    workflow.do_engine_steps()
    while refresh_conditions(workflow):
        workflow.do_engine_steps()

    assert workflow.is_completed()
    assert workflow.last_task.data["archived_id"] == "INV-9"


def test_a_conditional_catch_event_passes_at_once_when_its_feel_condition_already_holds(script_engine):
    workflow = workflow_of(deploy.parse_definition(definitions(CATCH)), script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data["stock"] = 12
    workflow.do_engine_steps()

    assert workflow.is_completed()


def test_a_condition_that_cannot_be_translated_or_is_missing_is_refused_at_deploy():
    untranslatable = refusal(definitions(CATCH.replace("= stock &gt; 10", "${stock.size() &gt; 10}")))
    missing = refusal(definitions(CATCH.replace("<bpmn:condition>= stock &gt; 10</bpmn:condition>", "")))

    assert untranslatable[0]["element_id"] == "until"
    assert "the method call size(...)" in untranslatable[0]["message"]
    assert missing[0]["message"] == ("intermediateCatchEvent conditionalEventDefinition needs a condition: the "
                                     "expression it waits to become true.")


def test_a_conditional_start_event_stays_refused_saying_so():
    starting = process("""<bpmn:startEvent id="s"><bpmn:conditionalEventDefinition><bpmn:condition>x</bpmn:condition>
      </bpmn:conditionalEventDefinition></bpmn:startEvent><bpmn:sequenceFlow id="f" sourceRef="s" targetRef="e" />
      <bpmn:endEvent id="e" />""")

    [error] = refusal(definitions(starting))

    assert error["message"] == "startEvent with conditionalEventDefinition is not supported yet."
