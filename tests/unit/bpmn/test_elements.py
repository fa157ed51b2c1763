"""bpmn/: each newly allowed element deploys and runs in SpiffWorkflow to the expected end.

Every fixture is deployed with ``parse_definition``, restored from its ``spec_json`` (so Baton's
spec classes serialize) and run in memory with the sandbox script engine, the way the engine does.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from SpiffWorkflow.bpmn.specs.event_definitions.simple import NoneEventDefinition
from SpiffWorkflow.bpmn.util.event import BpmnEvent
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.exceptions import WorkflowException
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from bpmn.events import message_event, start_at
from engine.store.pruning import prune

FIXTURES = Path(__file__).resolve().parents[2] / "bpmn"


def deployed(name: str) -> deploy.ParsedDefinition:
    return deploy.parse_definition((FIXTURES / f"{name}.bpmn").read_bytes())


def start(name: str, engine, *, timer: str | None = None, **variables) -> BpmnWorkflow:
    """A new instance of a fixture; ``timer`` replaces its short timer (PT0.1S, PT0.2S) where a
    test must see the instance before the timer fires, however slow the machine is."""
    xml = (FIXTURES / f"{name}.bpmn").read_text()
    if timer is not None:
        xml = xml.replace(">PT0.1S<", f">{timer}<").replace(">PT0.2S<", f">{timer}<")
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(xml).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(variables)
    workflow.do_engine_steps()
    return workflow


def saved_and_restored(workflow: BpmnWorkflow, engine) -> BpmnWorkflow:
    """The instance as the engine keeps it between two advances: pruned (engine.store.pruning), here
    whatever its size, so that every element also runs on a tree whose finished tasks were removed."""
    prune(workflow, above=0)
    return bpmn.workflow_from_json(bpmn.workflow_to_json(workflow), workflow.spec,
                                   workflow.subprocess_specs, engine)


def task(workflow: BpmnWorkflow, bpmn_id: str):
    [found] = [t for t in workflow.get_tasks() if t.task_spec.bpmn_id == bpmn_id
               and not t.task_spec.name.endswith("[child]")]
    return found


def ready(workflow: BpmnWorkflow) -> list[str]:
    return sorted(t.task_spec.bpmn_id for t in workflow.get_tasks(state=TaskState.READY))


def complete(workflow: BpmnWorkflow, bpmn_id: str, **result) -> None:
    found = task(workflow, bpmn_id)
    found.data.update(result)
    found.run()
    workflow.do_engine_steps()


def after_timers(workflow: BpmnWorkflow, seconds: float) -> None:
    time.sleep(seconds)
    workflow.refresh_timers()
    workflow.do_engine_steps()


def finished(workflow: BpmnWorkflow) -> bool:
    return workflow.is_completed() and workflow.success


# -- timers ---------------------------------------------------------------------------------------

def test_an_intermediate_timer_written_bare_waits_then_continues(script_engine):
    workflow = start("cov_timer_catch", script_engine, timer="PT0.5S")
    assert task(workflow, "wait").state == TaskState.WAITING
    workflow = saved_and_restored(workflow, script_engine)
    after_timers(workflow, 0.6)
    assert finished(workflow)
    assert workflow.data == {"waited": True}


def test_a_bare_iso_duration_is_handed_to_spiffworkflow_as_a_string_literal():
    spec = deployed("cov_timer_catch").spec
    assert spec.task_specs["wait"].event_definition.expression == '"PT0.1S"'


def test_a_timer_date_in_the_past_fires_at_once(script_engine):
    workflow = start("cov_timer_date", script_engine)
    assert finished(workflow)


def test_a_top_level_timer_start_is_listed_for_the_engine_and_starts_at_once_in_spiffworkflow(script_engine):
    parsed = deployed("cov_timer_start")
    assert parsed.timer_starts == [deploy.TimerStartInfo("every_hour", "timeCycle", '"R3/PT1H"', line=7)]
    assert parsed.start_events == [deploy.StartEventInfo("every_hour", "timer", None, line=7)]
    start_spec = parsed.spec.task_specs["every_hour"]
    assert isinstance(start_spec.event_definition, NoneEventDefinition)
    assert start_spec.extensions["timer"] == {"kind": "timeCycle", "expression": '"R3/PT1H"'}
    workflow = start("cov_timer_start", script_engine)
    assert finished(workflow)
    assert workflow.data == {"reported": True}


# -- messages -------------------------------------------------------------------------------------

def test_a_message_catch_event_takes_the_messages_variables(script_engine):
    assert deployed("cov_message_catch").messages == ["payment_received"]
    workflow = saved_and_restored(start("cov_message_catch", script_engine, due=100), script_engine)
    waiting = task(workflow, "paid")
    assert waiting.state == TaskState.WAITING
    assert waiting.task_spec.event_definition.name == "payment_received"
    workflow.send_event(BpmnEvent(waiting.task_spec.event_definition, payload={"amount": 30}))
    workflow.do_engine_steps()
    assert finished(workflow)
    assert workflow.data == {"due": 100, "amount": 30, "balance": 70}


def test_message_event_builds_an_event_that_any_message_catcher_of_that_name_accepts(script_engine):
    workflow = start("cov_message_catch", script_engine, due=100)
    workflow.send_event(message_event("payment_received", {"amount": 100}))
    workflow.do_engine_steps()
    assert workflow.data["balance"] == 0


def test_a_message_nobody_waits_for_is_refused_by_send_event(script_engine):
    workflow = start("cov_message_catch", script_engine, due=100)
    with pytest.raises(WorkflowException):
        workflow.send_event(message_event("payment_refunded", {}))
    assert task(workflow, "paid").state == TaskState.WAITING


def test_a_receive_task_waits_for_its_message_named_by_id_when_the_message_has_no_name(script_engine):
    parsed = deployed("cov_receive_task")
    assert parsed.messages == ["Message_signed"]
    workflow = start("cov_receive_task", script_engine)
    receive = task(workflow, "receive_contract")
    assert receive.state == TaskState.WAITING
    workflow.send_event(BpmnEvent(receive.task_spec.event_definition, payload={"signed_by": "Ada"}))
    workflow.do_engine_steps()
    assert finished(workflow)
    assert workflow.data == {"signed_by": "Ada"}


# -- boundary events ------------------------------------------------------------------------------

def test_an_interrupting_timer_boundary_cancels_the_user_task_and_takes_the_escalation_path(script_engine):
    workflow = start("cov_boundary_timer_interrupting", script_engine, timer="PT0.5S")
    workflow = saved_and_restored(workflow, script_engine)
    assert ready(workflow) == ["approve"]
    after_timers(workflow, 0.6)
    assert task(workflow, "approve").state == TaskState.CANCELLED
    assert finished(workflow)
    assert workflow.data == {"escalated": True}


def test_finishing_the_user_task_in_time_drops_the_interrupting_timer(script_engine):
    workflow = start("cov_boundary_timer_interrupting", script_engine, timer="PT1H")
    complete(workflow, "approve", decision="approve")
    assert finished(workflow)
    assert workflow.data == {"decision": "approve"}
    assert task(workflow, "too_late").state == TaskState.CANCELLED


def test_a_non_interrupting_timer_boundary_runs_its_path_and_the_user_task_stays_open(script_engine):
    workflow = start("cov_boundary_timer_noninterrupting", script_engine)
    after_timers(workflow, 0.15)
    assert ready(workflow) == ["approve"]
    assert task(workflow, "send_reminder").state == TaskState.COMPLETED
    complete(workflow, "approve", decision="approve")
    assert finished(workflow)
    assert workflow.data == {"decision": "approve", "reminded": True}


def test_an_error_end_event_is_caught_by_the_error_boundary_with_the_subprocess_variables(script_engine):
    workflow = start("cov_error_boundary", script_engine, quantity=5, stock=2)
    assert finished(workflow)
    assert workflow.data["outcome"] == "refunded, 3 missing"
    assert task(workflow, "ship").state != TaskState.COMPLETED


def test_a_subprocess_that_ends_normally_does_not_trigger_its_error_boundary(script_engine):
    workflow = start("cov_error_boundary", script_engine, quantity=1, stock=2)
    assert finished(workflow)
    assert workflow.data["outcome"] == "shipped"


def test_an_escalation_reaches_a_non_interrupting_boundary_and_the_subprocess_goes_on(script_engine):
    workflow = start("cov_escalation", script_engine)
    assert finished(workflow)
    assert workflow.data == {"packed": True, "sales_told": True}


def test_a_terminate_end_event_stops_the_other_parallel_branch(script_engine):
    workflow = start("cov_terminate", script_engine)
    assert finished(workflow)
    assert task(workflow, "ask_person").state == TaskState.CANCELLED
    assert workflow.data == {"answer": "automatic"}


# -- subprocesses ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("quantity", "total"), [(10, 95.0), (2, 25)])
def test_an_embedded_subprocess_sees_and_returns_the_process_variables(script_engine, quantity, total):
    workflow = start("cov_subprocess", script_engine, quantity=quantity, shipping=5)
    assert finished(workflow)
    assert workflow.data["total"] == total


def test_an_error_starts_the_event_subprocess_which_interrupts_the_rest_of_the_process(script_engine):
    workflow = start("cov_event_subprocess_error", script_engine, quantity=0)
    assert finished(workflow)
    assert task(workflow, "review").state == TaskState.CANCELLED
    assert workflow.data["rejected"] == "quantity must be positive"


def test_an_event_subprocess_that_never_starts_does_not_keep_the_process_running(script_engine):
    workflow = start("cov_event_subprocess_error", script_engine, quantity=3)
    assert ready(workflow) == ["review"]
    complete(workflow, "review")
    assert finished(workflow)
    assert "rejected" not in workflow.data


def test_a_non_interrupting_timer_event_subprocess_runs_beside_the_user_task(script_engine):
    workflow = saved_and_restored(start("cov_event_subprocess_timer", script_engine), script_engine)
    after_timers(workflow, 0.15)
    assert ready(workflow) == ["review"]
    complete(workflow, "review")
    assert finished(workflow)
    assert workflow.data == {"reminded": True}


def test_a_timer_event_subprocess_is_dropped_when_the_process_ends_first(script_engine):
    workflow = start("cov_event_subprocess_timer", script_engine, timer="PT1H")
    complete(workflow, "review")
    assert finished(workflow)
    assert workflow.data == {}


def test_event_subprocesses_do_not_change_the_shared_spec_while_running(script_engine):
    spec, subprocess_specs = bpmn.load_spec(deployed("cov_event_subprocess_error").spec_json)
    outputs = [s.name for s in spec.start.outputs]
    for quantity in (0, 3, 0):
        workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
        workflow.get_tasks(state=TaskState.READY)[0].data["quantity"] = quantity
        workflow.do_engine_steps()
        assert finished(workflow) == (quantity == 0)
    assert [s.name for s in spec.start.outputs] == outputs


def test_a_call_activity_runs_a_process_of_another_definition_composed_by_the_engine(script_engine):
    caller, callee = deployed("cov_call_activity_caller"), deployed("cov_call_activity_callee")
    assert caller.called_elements == ["cov_call_activity_callee"]
    assert caller.subprocess_specs == {}
    # What the engine does at load time: the callee's spec under the calledElement name, plus
    # the callee's own subprocess specs.
    spec, subprocess_specs = bpmn.load_spec(caller.spec_json)
    callee_spec, callee_subprocesses = bpmn.load_spec(callee.spec_json)
    composed = {**subprocess_specs, "cov_call_activity_callee": callee_spec, **callee_subprocesses}
    workflow = BpmnWorkflow(spec, composed, script_engine=script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(net=100, country="FR")
    workflow.do_engine_steps()
    assert finished(workflow)
    assert workflow.data == {"net": 100, "country": "FR", "rate": 0.2, "tax": 20.0, "total": 120.0}


def test_a_call_activity_without_its_called_process_fails_when_it_is_reached(script_engine):
    spec, subprocess_specs = bpmn.load_spec(deployed("cov_call_activity_caller").spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
    with pytest.raises(WorkflowException, match="cov_call_activity_callee"):
        workflow.do_engine_steps()


# -- loops ----------------------------------------------------------------------------------------

def test_a_standard_loop_repeats_while_its_condition_holds(script_engine):
    workflow = start("cov_standard_loop", script_engine, attempts=0)
    assert finished(workflow)
    assert workflow.data == {"attempts": 3}


def test_a_sequential_multi_instance_over_a_camunda_collection_sees_each_previous_result(script_engine):
    lines = [{"price": 2, "quantity": 3}, {"price": 5, "quantity": 1}]
    workflow = start("cov_multi_instance_sequential", script_engine, lines=lines, total=0)
    assert finished(workflow)
    assert workflow.data == {"lines": lines, "total": 11}  # the item variable stays in each instance


def test_a_parallel_multi_instance_collects_each_instances_output(script_engine):
    workflow = start("cov_multi_instance_parallel", script_engine, suppliers=["acme", "globex"])
    assert finished(workflow)
    assert workflow.data == {"suppliers": ["acme", "globex"],
                             "quotes": [{"supplier": "acme", "price": 400},
                                        {"supplier": "globex", "price": 600}]}


# -- gateways -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("variables", "taken"), [
    ({"amount": 5000, "country": "DE"}, {"legal", "export"}),
    ({"amount": 5000, "country": "FR"}, {"legal"}),
    ({"amount": 10, "country": "FR"}, {"logged"}),
])
def test_an_inclusive_gateway_takes_every_true_branch_and_joins_them(script_engine, variables, taken):
    workflow = start("cov_inclusive_gateway", script_engine, **variables)
    assert finished(workflow)
    assert set(workflow.data) - set(variables) == taken


def test_a_parallel_gateway_joins_a_script_and_a_user_task(script_engine):
    workflow = start("cov_parallel_gateway", script_engine)
    assert ready(workflow) == ["invoice"]
    complete(workflow, "invoice")
    assert finished(workflow)
    assert workflow.data == {"packed": True}


def test_an_event_based_gateway_follows_the_message_when_it_comes_first(script_engine):
    workflow = saved_and_restored(start("cov_event_gateway", script_engine, timer="PT1H"), script_engine)
    assert task(workflow, "first").state == TaskState.WAITING
    workflow.send_event(message_event("customer_answered", {"answer": "yes"}))
    workflow.do_engine_steps()
    assert finished(workflow)
    assert workflow.data == {"answer": "yes", "outcome": "answered: yes"}


def test_an_event_based_gateway_follows_the_timer_when_no_message_comes(script_engine):
    workflow = start("cov_event_gateway", script_engine)
    after_timers(workflow, 0.25)
    assert finished(workflow)
    assert workflow.data == {"outcome": "timed out"}


# -- operators and start events -------------------------------------------------------------------

def test_an_http_task_is_left_ready_for_the_engine_and_carries_its_operator(script_engine):
    workflow = start("cov_http_task", script_engine, customer_id=7, subject="Broken")
    assert ready(workflow) == ["create_ticket"]
    http = task(workflow, "create_ticket")
    assert http.task_spec.manual is True
    assert http.task_spec.extensions["operator"] == "http"
    assert http.task_spec.extensions["properties"]["result_variable"] == "ticket"
    workflow = saved_and_restored(workflow, script_engine)
    http = task(workflow, "create_ticket")
    assert http.task_spec.manual is True
    assert type(http.task_spec).__name__ == "OperatorTask"
    complete(workflow, "create_ticket", ticket={"id": 41})  # what the engine does with the answer
    assert finished(workflow)
    assert workflow.data["ticket_id"] == 41


def test_start_at_begins_a_process_at_the_chosen_one_of_several_start_events(script_engine):
    xml = (FIXTURES / "cov_timer_start.bpmn").read_text().replace(
        '<bpmn:sequenceFlow id="f1"',
        '<bpmn:startEvent id="by_hand" />\n    <bpmn:sequenceFlow id="f0" sourceRef="by_hand" targetRef="skip" />\n'
        '    <bpmn:scriptTask id="skip"><bpmn:script>by_hand = True</bpmn:script></bpmn:scriptTask>\n'
        '    <bpmn:sequenceFlow id="f9" sourceRef="skip" targetRef="end" />\n    <bpmn:sequenceFlow id="f1"')
    xml = xml.replace("</bpmn:process>", (FIXTURES / "cov_event_subprocess_timer.bpmn").read_text().split(
        "<bpmn:endEvent id=\"end\" />")[1].split("</bpmn:process>")[0] + "</bpmn:process>")
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(xml).spec_json)
    assert "reminder" in subprocess_specs  # an event subprocess too: its task starts with the process
    for chosen, expected in (("every_hour", {"reported": True}), ("by_hand", {"by_hand": True})):
        workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
        start_at(workflow, chosen)
        workflow.do_engine_steps()
        assert finished(workflow)
        assert workflow.data == expected


# -- messages to boundary events and event subprocesses --------------------------------------------

def test_a_message_boundary_interrupts_the_user_task_with_the_messages_variables(script_engine):
    parsed = deployed("cov_boundary_message")
    assert parsed.messages == ["order_cancelled"]
    assert parsed.spec.task_specs["cancelled"].event_definition.name == "order_cancelled"
    workflow = start("cov_boundary_message", script_engine)
    workflow.send_event(message_event("order_cancelled", {"reason": "customer asked"}))
    workflow.do_engine_steps()
    assert finished(workflow)
    assert task(workflow, "pack").state == TaskState.CANCELLED
    assert workflow.data == {"reason": "customer asked", "status": "cancelled: customer asked"}


def test_a_message_starts_an_interrupting_event_subprocess_that_cancels_both_user_tasks(script_engine):
    parsed = deployed("cov_event_subprocess_message")
    assert parsed.messages == ["application_withdrawn"]
    workflow = start("cov_event_subprocess_message", script_engine, number=7)
    workflow = saved_and_restored(workflow, script_engine)
    assert ready(workflow) == ["check_credit", "check_identity"]
    [waiting] = [t for t in workflow.get_tasks(state=TaskState.WAITING) if t.task_spec.bpmn_id == "withdrawn"]
    assert waiting.task_spec.event_definition.name == "application_withdrawn"
    workflow.send_event(BpmnEvent(waiting.task_spec.event_definition, payload={"reason": "found a cheaper loan"}))
    workflow.do_engine_steps()
    assert finished(workflow)
    assert ready(workflow) == []
    assert {task(workflow, i).state for i in ("check_credit", "check_identity")} == {TaskState.CANCELLED}
    # The event subprocess sees what the process computed before the message, and the message.
    assert workflow.data == {"number": 7, "application": "A-7", "reason": "found a cheaper loan",
                             "closed": "A-7 withdrawn: found a cheaper loan"}


def test_a_computed_timer_expression_is_evaluated_with_the_process_variables(script_engine):
    xml = (FIXTURES / "cov_timer_catch.bpmn").read_text().replace(">PT0.1S<", '>"PT" + str(seconds) + "S"<')
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(xml).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data["seconds"] = 3600
    workflow.do_engine_steps()
    due = task(workflow, "wait").internal_data["event_value"]
    assert due > time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3500))


def test_an_error_ending_a_called_process_is_caught_by_a_boundary_on_the_call_activity(script_engine):
    caller_xml = (FIXTURES / "cov_call_activity_caller.bpmn").read_text().replace(
        '<bpmn:sequenceFlow id="f2" sourceRef="compute_tax" targetRef="total" />',
        '<bpmn:boundaryEvent id="no_rate" attachedToRef="compute_tax">'
        "<bpmn:errorEventDefinition /></bpmn:boundaryEvent>"
        '<bpmn:sequenceFlow id="f9" sourceRef="no_rate" targetRef="manual" />'
        '<bpmn:scriptTask id="manual"><bpmn:script>total = None</bpmn:script></bpmn:scriptTask>'
        '<bpmn:sequenceFlow id="f10" sourceRef="manual" targetRef="end" />'
        '<bpmn:sequenceFlow id="f2" sourceRef="compute_tax" targetRef="total" />')
    callee_xml = (FIXTURES / "cov_call_activity_callee.bpmn").read_text().replace(
        '<bpmn:endEvent id="end" />',
        '<bpmn:endEvent id="end"><bpmn:errorEventDefinition errorRef="Error_rate" /></bpmn:endEvent>').replace(
        '<bpmn:process id=', '<bpmn:error id="Error_rate" errorCode="NO_RATE" /><bpmn:process id=')
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(caller_xml).spec_json)
    callee_spec, callee_subprocesses = bpmn.load_spec(deploy.parse_definition(callee_xml).spec_json)
    composed = {**subprocess_specs, "cov_call_activity_callee": callee_spec, **callee_subprocesses}
    workflow = BpmnWorkflow(spec, composed, script_engine=script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(net=100, country="DE")
    workflow.do_engine_steps()
    assert finished(workflow)
    assert task(workflow, "total").state != TaskState.COMPLETED
    assert workflow.data == {"net": 100, "country": "DE", "rate": 0.1, "tax": 10.0, "total": None}


def test_an_error_nobody_catches_is_left_in_the_workflows_events_for_the_engine(script_engine):
    xml = (FIXTURES / "cov_error_boundary.bpmn").read_text().replace(
        '<bpmn:boundaryEvent id="no_stock" attachedToRef="reserve">', "").replace(
        '<bpmn:errorEventDefinition id="no_stock_error" errorRef="Error_out_of_stock" />\n    </bpmn:boundaryEvent>',
        "").replace('<bpmn:sequenceFlow id="f4" sourceRef="no_stock" targetRef="refund" />', "")
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(xml).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(quantity=5, stock=2)
    workflow.do_engine_steps()
    [uncaught] = workflow.get_events()
    assert (type(uncaught.event_definition).__name__, uncaught.event_definition.code) == (
        "ErrorDefinition", "OUT_OF_STOCK")
    assert uncaught.payload["missing"] == 3
