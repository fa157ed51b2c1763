"""bpmn/: what still cannot run is refused at deploy with the element id, the line and one sentence.

Each ``cov_refused_*`` fixture gathers the refusals of one topic; every problem of a file is
reported at once, and nothing else is.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from bpmn import deploy
from tests.unit.bpmn.refusals import refusal

FIXTURES = Path(__file__).resolve().parents[2] / "bpmn"


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.bpmn").read_text()


def assert_refusals(errors: list[dict], expected: list[tuple[str, int, str]]) -> None:
    """Exactly these (element id, line) pairs, each message containing its phrase."""
    assert sorted((e["element_id"], e["line"]) for e in errors) == sorted((i, line) for i, line, _ in expected)
    for element_id, line, phrase in expected:
        messages = [e["message"] for e in errors if (e["element_id"], e["line"]) == (element_id, line)]
        assert any(phrase in message for message in messages), (element_id, line, phrase, messages)


def test_timers_that_cannot_run_or_repeat_without_end_are_refused():
    assert_refusals(refusal(fixture("cov_refused_timers")), [
        ("forever", 8, "timeCycle 'R/PT1H' repeats forever"),
        ("too_often", 11, "repeats 5000 times; it must be 1 to 1000"),
        ("computed_cycle", 14, "must be a literal R<n>/<duration>"),
        ("juel", 20, "timeDuration '${dateTime().plusMinutes(5)}' cannot be translated from JUEL: the function "
                     "call dateTime(...) at position 3"),
        ("typo", 24, "timeDuration 'PT5X' is not an ISO 8601 duration"),
        ("wrong_kind", 28, "timeDate 'PT5M' is written like a timeDuration"),
        ("empty", 32, "has no timeDate, timeDuration or timeCycle"),
        ("evil", 36, "function '__import__' is not available"),
        ("repeat", 40, "A timeCycle repeats, which an intermediateCatchEvent cannot"),
        ("repeat_and_cancel", 45, "which an interrupting boundaryEvent cannot"),
    ])


def test_events_in_places_they_cannot_run_are_refused():
    assert_refusals(refusal(fixture("cov_refused_events")), [
        ("on_error", 12, "can only start an event subProcess"),
        ("nothing", 17, "intermediateCatchEvent needs a timer, message, signal or conditional definition"),
        ("no_ref", 20, "needs a messageRef naming a bpmn:message"),
        ("bad_ref", 24, "messageRef 'Message_missing' names no bpmn:message of this file"),
        ("listen", 31, "receiveTask needs a messageRef"),
        ("listen", 31, "A receiveTask cannot start the process"),
        ("choose", 36, "eventBasedGateway leads to task 'work'"),
        ("later", 40, "two timers after one eventBasedGateway fire at the wrong time (an upstream bug)"),
        ("catch_on_task", 46, "'work' is a task"),
        ("nowhere", 49, "attachedToRef 'choose' is not an activity of this process"),
        ("inner_start", 56, "A subProcess starts at a none start event"),
        ("nested_handler_start", 62, "must sit directly in the process"),
        ("soft_error", 69, "An error boundaryEvent always interrupts its activity"),
        ("soft_error", 70, "errorRef 'Error_missing' names no bpmn:error"),
        ("handler", 75, "An event subProcess needs exactly one start event; this one has 2."),
        ("handler_start", 76, "An error start event always interrupts its scope"),
        ("handler_second", 79, "this start event waits for nothing"),
        ("payment", 84, "A transaction needs exactly one start event; this one has 0."),
        ("payment", 84, "A transaction needs an end event."),
        ("checklist", 85, "adHocSubProcess is not supported yet."),
    ])


def test_loops_without_a_bound_or_with_foreign_expressions_are_refused():
    assert_refusals(refusal(fixture("cov_refused_loops")), [
        ("too_many", 11, "loopCardinality 1001 is more than the 1000 repetitions Baton allows."),
        ("over_nothing", 16, "needs a loopCardinality or a collection"),
        ("juel_collection", 20, "camunda:collection '${order.items}' must name one variable"),
        ("half_output", 24, "needs loopDataOutputRef and outputDataItem together"),
        ("endless", 32, "needs a loopCondition or a loopMaximum"),
        ("juel_condition", 36, "loopMaximum 5000 is more than the 1000 repetitions"),
        ("juel_condition", 37, "loopCondition '${tries.size() < 3}' cannot be translated from JUEL: the method "
                            "call size(...)"),
        ("bad_completion", 44, "completionCondition 'done ==' cannot run: invalid syntax"),
        ("wait_each", 49, "receiveTask with multiInstanceLoopCharacteristics is not supported yet."),
    ])


def test_a_loop_cardinality_of_exactly_the_cap_is_accepted():
    xml = fixture("cov_multi_instance_parallel").replace(
        "<bpmn:loopDataInputRef>suppliers</bpmn:loopDataInputRef>",
        "<bpmn:loopCardinality>1000</bpmn:loopCardinality>")
    assert deploy.parse_definition(xml).process_id == "cov_multi_instance_parallel"


def test_http_tasks_with_unusable_properties_are_refused_at_the_property_line():
    assert_refusals(refusal(fixture("cov_refused_http")), [
        ("no_url", 9, "serviceTask (http) needs a 'url' property."),
        ("no_url", 13, "method 'FETCH' must be one of GET, POST, PUT, PATCH, DELETE, HEAD."),
        ("ftp", 22, "url 'ftp://files.example.com/report' must be an http:// or https:// URL."),
        ("ftp", 23, "headers must be a JSON object of header names to text"),
        ("ftp", 24, "timeout_s '120' must be a number from 1 to 60."),
        ("ftp", 25, "retries '2.5' must be a whole number from 0 to 10."),
        ("bad_templates", 34, "url cannot be rendered: {{ __class__ }}"),
        ("bad_templates", 35, "body cannot be rendered: {{ order. }}"),
        ("bad_templates", 36, "header 'X-Token' cannot be rendered"),
        ("bad_templates", 37, "result_variable 'the result' must be a variable name."),
        ("say", 46, "serviceTask (send_message) text cannot be rendered: {{ name. }}"),
    ])


def test_calls_that_cannot_be_resolved_by_code_are_refused():
    assert_refusals(refusal(fixture("cov_refused_calls")), [
        ("call_nothing", 13, "callActivity needs a calledElement"),
        ("call_myself", 15, "a process cannot call itself"),
        ("call_mapped", 19, "calledElementBinding 'deployment' is not supported"),
        ("call_mapped", 21, "camunda:in variable mappings is not supported yet"),
    ])


# -- containers -----------------------------------------------------------------------------------

def test_a_subprocess_is_checked_like_a_process():
    xml = fixture("cov_subprocess").replace(
        '<bpmn:script>price = quantity * 10</bpmn:script>', "<bpmn:script>import os</bpmn:script>").replace(
        '<bpmn:endEvent id="pricing_end" />', "").replace(
        '<bpmn:sequenceFlow id="p3" sourceRef="discount" targetRef="pricing_end" />',
        '<bpmn:sequenceFlow id="p3" sourceRef="discount" targetRef="total" />').replace(
        '<bpmn:sequenceFlow id="p_normal" sourceRef="bulk" targetRef="pricing_end" />',
        '<bpmn:sendTask id="notify" /><bpmn:sequenceFlow id="p_normal" sourceRef="bulk" targetRef="notify" />')
    errors = refusal(xml)
    found = {(e["element_id"], e["message"].split(":")[0].split(";")[0]) for e in errors}
    assert found == {
        ("pricing", "A subProcess needs an end event."),
        ("base_price", "scriptTask script cannot run"),
        ("p3", "sequenceFlow targetRef 'total' is not an element of this subProcess."),
    }


def test_an_event_subprocess_cannot_be_wired_with_sequence_flows():
    xml = fixture("cov_event_subprocess_timer").replace(
        '<bpmn:sequenceFlow id="f2" sourceRef="review" targetRef="end" />',
        '<bpmn:sequenceFlow id="f2" sourceRef="review" targetRef="reminder" />'
        '<bpmn:sequenceFlow id="f2b" sourceRef="reminder" targetRef="end" />')
    [error] = refusal(xml)
    assert error["element_id"] == "reminder"
    assert error["message"].startswith("An event subProcess (triggeredByEvent) cannot have incoming")


def test_a_boundary_event_must_be_attached_in_its_own_container():
    xml = fixture("cov_subprocess").replace(
        '<bpmn:sequenceFlow id="f2" sourceRef="pricing" targetRef="total" />',
        '<bpmn:boundaryEvent id="slow" attachedToRef="base_price"><bpmn:timerEventDefinition>'
        "<bpmn:timeDuration>PT1M</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:boundaryEvent>"
        '<bpmn:sequenceFlow id="f2" sourceRef="pricing" targetRef="total" />')
    [error] = refusal(xml)
    assert (error["element_id"], error["message"]) == (
        "slow", "boundaryEvent attachedToRef 'base_price' is not an activity of this process.")


def test_an_event_with_two_definitions_it_cannot_combine_is_refused_as_a_multiple_event_saying_what_can():
    xml = fixture("cov_message_catch").replace(
        '<bpmn:messageEventDefinition id="paid_message" messageRef="Message_paid" />',
        '<bpmn:messageEventDefinition id="paid_message" messageRef="Message_paid" />'
        "<bpmn:conditionalEventDefinition><bpmn:condition>done</bpmn:condition></bpmn:conditionalEventDefinition>")
    [error] = refusal(xml)
    assert error["element_id"] == "paid"
    assert error["message"].startswith("intermediateCatchEvent with messageEventDefinition and "
                                       "conditionalEventDefinition (a multiple event) is not supported: a start event "
                                       "of the process may combine message and signal definitions")


def test_a_trigger_property_on_a_timer_start_event_is_refused():
    xml = fixture("cov_timer_start").replace(
        '<bpmn:startEvent id="every_hour" name="Every hour">',
        '<bpmn:startEvent id="every_hour" name="Every hour"><bpmn:extensionElements><camunda:properties>'
        '<camunda:property name="trigger" value="webhook" /></camunda:properties></bpmn:extensionElements>')
    [error] = refusal(xml)
    assert error["element_id"] == "every_hour"
    assert "remove its 'trigger' property (webhook)" in error["message"]


# -- accepted forms -------------------------------------------------------------------------------

@pytest.mark.parametrize(("written", "expression"), [
    ("PT5M", '"PT5M"'),
    ('"PT5M"', '"PT5M"'),
    ("'PT5M'", '"PT5M"'),
    ('"PT" + str(minutes) + "M"', '"PT" + str(minutes) + "M"'),
])
def test_a_duration_is_accepted_bare_quoted_or_computed(written, expression):
    xml = fixture("cov_timer_catch").replace(">PT0.1S<", f">{written}<")
    spec = deploy.parse_definition(xml).spec
    assert spec.task_specs["wait"].event_definition.expression == expression


def test_message_correlation_is_accepted_and_ignored():
    xml = fixture("cov_message_catch").replace(
        '<bpmn:message id="Message_paid" name="payment_received" />',
        '<bpmn:message id="Message_paid" name="payment_received" />'
        '<bpmn:correlationProperty id="order_id" name="Order">'
        "<bpmn:correlationPropertyRetrievalExpression messageRef=\"Message_paid\">"
        "<bpmn:messagePath>order_id</bpmn:messagePath></bpmn:correlationPropertyRetrievalExpression>"
        "</bpmn:correlationProperty>"
        '<bpmn:collaboration id="c"><bpmn:correlationKey name="order_key">'
        "<bpmn:correlationPropertyRef>order_id</bpmn:correlationPropertyRef></bpmn:correlationKey>"
        "</bpmn:collaboration>")
    parsed = deploy.parse_definition(xml)
    definition = parsed.spec.task_specs["paid"].event_definition
    assert definition.name == "payment_received"
    assert definition.correlation_properties == []


def test_an_interrupting_event_subprocess_cannot_start_on_a_repeating_timer():
    cycle = fixture("cov_event_subprocess_timer").replace(
        '<bpmn:timeDuration xsi:type="bpmn:tFormalExpression">PT0.1S</bpmn:timeDuration>',
        "<bpmn:timeCycle>R3/PT1H</bpmn:timeCycle>")
    assert deploy.parse_definition(cycle).process_id == "cov_event_subprocess_timer"  # non-interrupting
    [error] = refusal(cycle.replace('isInterrupting="false"', ""))
    assert (error["element_id"], error["line"]) == ("reminder_start", 15)  # the timeCycle line
    assert "an interrupting event subProcess starts once" in error["message"]


def test_an_event_subprocess_can_neither_loop_nor_carry_a_boundary_event():
    xml = fixture("cov_event_subprocess_timer").replace(
        '<bpmn:subProcess id="reminder" name="Reminder" triggeredByEvent="true">',
        '<bpmn:subProcess id="reminder" name="Reminder" triggeredByEvent="true">'
        '<bpmn:standardLoopCharacteristics loopMaximum="2" />').replace(
        '<bpmn:endEvent id="end" />',
        '<bpmn:endEvent id="end" /><bpmn:boundaryEvent id="late" attachedToRef="reminder">'
        "<bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition>"
        "</bpmn:boundaryEvent>")
    errors = {e["element_id"]: e["message"] for e in refusal(xml)}
    assert errors == {
        "reminder": "An event subProcess cannot loop: its start event starts it.",
        "late": "boundaryEvent is attached to event subProcess 'reminder', which has no boundary; attach it "
                "to an activity of the flow.",
    }


def test_a_timer_start_of_the_process_must_be_a_literal():
    xml = fixture("cov_timer_start").replace(
        "<bpmn:timeCycle xsi:type=\"bpmn:tFormalExpression\">R3/PT1H</bpmn:timeCycle>",
        "<bpmn:timeDuration>\"PT\" + str(hours) + \"H\"</bpmn:timeDuration>")
    [error] = refusal(xml)
    assert (error["element_id"], error["line"]) == ("every_hour", 9)
    assert error["message"].startswith("A timer start event of the process needs a literal timeDuration")
