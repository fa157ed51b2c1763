"""What a waiting instance shows the engine, measured on SpiffWorkflow 3.2 with Baton's specs.

These pin the formats the engine reads to schedule timers and route messages:
``task.internal_data['event_value']`` and ``workflow.waiting_events()`` per timer kind, for timers
inside subprocesses and behind an event-based gateway, and the names of waiting messages.
"""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy

FIXTURES = Path(__file__).resolve().parents[2] / "bpmn"


def started(xml: str | bytes, engine) -> BpmnWorkflow:
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(xml).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=engine)
    workflow.do_engine_steps()
    return workflow


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.bpmn").read_text()


def waiting(workflow: BpmnWorkflow, bpmn_id: str):
    [task] = [t for t in workflow.get_tasks(state=TaskState.WAITING) if t.task_spec.bpmn_id == bpmn_id]
    return task


def pending(workflow: BpmnWorkflow) -> list[tuple]:
    return [(event.name, event.event_type, event.value) for event in workflow.waiting_events()]


def test_a_duration_timer_stores_its_due_time_as_iso_utc_text(script_engine):
    before = datetime.now(timezone.utc)
    workflow = started(fixture("cov_timer_catch").replace(">PT0.1S<", ">PT1H<"), script_engine)
    value = waiting(workflow, "wait").internal_data["event_value"]
    assert value.endswith("+00:00")
    assert before + timedelta(hours=1) <= datetime.fromisoformat(value) <= before + timedelta(hours=1, seconds=30)
    # waiting_events() names the timer by the element's name (else its id).
    assert pending(workflow) == [("Wait 0.1 s", "DurationTimerEventDefinition", value)]


@pytest.mark.parametrize("written", ["2030-01-01T10:00:00+02:00", "2030-01-01"])
def test_a_date_timer_stores_the_text_as_evaluated_not_normalized(script_engine, written):
    workflow = started(fixture("cov_timer_date").replace("2020-01-01T00:00:00Z", written), script_engine)
    assert waiting(workflow, "until").internal_data["event_value"] == written
    assert pending(workflow) == [("Until 1 January 2020", "TimeDateEventDefinition", written)]


def test_a_cycle_timer_stores_a_dict_and_waiting_events_shows_its_next_due_time(script_engine):
    xml = fixture("cov_boundary_timer_noninterrupting").replace(
        '<bpmn:timeDuration xsi:type="bpmn:tFormalExpression">PT0.1S</bpmn:timeDuration>',
        "<bpmn:timeCycle>R2/PT1H</bpmn:timeCycle>")
    workflow = started(xml, script_engine)
    value = waiting(workflow, "remind").internal_data["event_value"]
    assert set(value) == {"cycles", "next", "duration"}
    assert (value["cycles"], value["duration"]) == (2, 3600.0)
    assert pending(workflow) == [("After 0.1 s", "CycleTimerEventDefinition", value["next"])]


def test_a_cycle_boundary_timer_fires_its_number_of_times_and_then_stops_waiting(script_engine):
    xml = fixture("cov_boundary_timer_noninterrupting").replace("PT0.1S", "PT0.05S").replace(
        "timeDuration", "timeCycle").replace(">PT0.05S<", ">R2/PT0.05S<")
    workflow = started(xml, script_engine)
    for _ in range(4):
        time.sleep(0.08)
        workflow.refresh_timers()
        workflow.do_engine_steps()
    reminders = [t for t in workflow.get_tasks(state=TaskState.COMPLETED) if t.task_spec.bpmn_id == "send_reminder"]
    assert len(reminders) == 2
    assert pending(workflow) == []
    assert [t.task_spec.bpmn_id for t in workflow.get_tasks(state=TaskState.READY)] == ["approve"]


def test_timers_inside_subprocesses_are_in_waiting_events_and_their_tasks_in_get_tasks(script_engine):
    xml = fixture("cov_subprocess").replace(
        '<bpmn:sequenceFlow id="p1" sourceRef="pricing_start" targetRef="base_price" />',
        '<bpmn:sequenceFlow id="p1" sourceRef="pricing_start" targetRef="pause" />'
        '<bpmn:intermediateCatchEvent id="pause"><bpmn:timerEventDefinition>'
        "<bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>"
        '<bpmn:sequenceFlow id="p0" sourceRef="pause" targetRef="base_price" />')
    workflow = started(xml, script_engine)
    task = waiting(workflow, "pause")
    assert task.workflow is not workflow  # it lives in the subprocess's own workflow
    assert pending(workflow) == [("pause", "DurationTimerEventDefinition", task.internal_data["event_value"])]


def test_an_event_subprocess_timer_start_waits_like_any_timer(script_engine):
    workflow = started(fixture("cov_event_subprocess_timer").replace(">PT0.1S<", ">PT1H<"), script_engine)
    task = waiting(workflow, "reminder_start")
    assert pending(workflow) == [("reminder_start", "DurationTimerEventDefinition",
                                  task.internal_data["event_value"])]


def test_behind_an_event_based_gateway_the_gateway_waits_and_holds_the_timer_due_time(script_engine):
    workflow = started(fixture("cov_event_gateway").replace(">PT0.2S<", ">PT1H<"), script_engine)
    gateway = waiting(workflow, "first")
    # Not visible in waiting_events(): the gateway shows one anonymous multiple event.
    assert pending(workflow) == [(None, "MultipleEventDefinition", None)]
    due = datetime.fromisoformat(gateway.internal_data["event_value"])
    assert due > datetime.now(timezone.utc)
    definitions = gateway.task_spec.event_definition.event_definitions
    assert [(type(d).__name__, d.name) for d in definitions] == [
        ("MessageDefinition", "customer_answered"), ("DurationTimerEventDefinition", "0.2 s passed")]
    # The catch events behind it wait for nothing of their own.
    assert [t.task_spec.bpmn_id for t in workflow.get_tasks(state=TaskState.WAITING)] == ["first"]


@pytest.mark.parametrize(("name", "bpmn_id", "message", "kind"), [
    ("cov_message_catch", "paid", "payment_received", "IntermediateCatchEvent"),
    ("cov_receive_task", "receive_contract", "Message_signed", "ReceiveTask"),
])
def test_a_waiting_message_is_named_by_the_bpmn_message_name(script_engine, name, bpmn_id, message, kind):
    workflow = started(fixture(name), script_engine)
    task = waiting(workflow, bpmn_id)
    assert type(task.task_spec).__name__ == kind
    assert task.task_spec.event_definition.name == message
    assert pending(workflow) == [(message, "MessageDefinition", [])]
