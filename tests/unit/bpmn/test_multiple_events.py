"""Events with several definitions: a multiple start event of the process starts it by any of its
messages and signals, a parallel multiple one once it has had all of them; a multiple catch event
waits for whichever comes first; each with the variables it carried; in memory."""
from __future__ import annotations

from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from tests.unit.bpmn.test_starts import definitions, process, workflow_of

SIGNALS = '<bpmn:signal id="S_go" name="go" />'


def starting(parallel: bool) -> str:
    flag = ' parallelMultiple="true"' if parallel else ""
    return definitions(SIGNALS + process(f"""
      <bpmn:startEvent id="by_hand" /><bpmn:sequenceFlow id="f0" sourceRef="by_hand" targetRef="e" />
      <bpmn:startEvent id="either"{flag}><bpmn:messageEventDefinition messageRef="M_order" />
        <bpmn:signalEventDefinition signalRef="S_go" /></bpmn:startEvent>
      <bpmn:sequenceFlow id="f1" sourceRef="either" targetRef="e" /><bpmn:endEvent id="e" />"""))


def test_a_multiple_start_event_is_listed_with_its_messages_and_signals_and_is_not_the_default():
    parsed = deploy.parse_definition(starting(parallel=True))
    start = parsed.start_events[1]

    assert (start.trigger, start.messages, start.signals, start.parallel) == ("multiple", ("order_placed",), ("go",),
                                                                             True)
    assert parsed.default_start == "by_hand"


def started_by(xml: str, engine, *events):
    workflow = workflow_of(deploy.parse_definition(xml), engine)
    bpmn.start_at(workflow, "either")
    workflow.do_engine_steps()
    for event in events:
        workflow.send_event(event)
        workflow.do_engine_steps()
    return workflow


def test_any_one_of_a_multiple_start_events_triggers_starts_it_with_its_variables(script_engine):
    by_signal = started_by(starting(False), script_engine, bpmn.signal_event("go", {"who": "ops"}))

    assert by_signal.is_completed() and by_signal.last_task.data == {"who": "ops"}


def test_a_parallel_multiple_start_event_waits_for_all_and_merges_what_each_carried(script_engine):
    half = started_by(starting(True), script_engine, bpmn.message_event("order_placed", {"order": 7}))
    assert not half.is_completed()

    half.send_event(bpmn.signal_event("go", {"who": "ops"}))
    half.do_engine_steps()

    assert half.is_completed() and half.last_task.data == {"order": 7, "who": "ops"}


def test_a_multiple_catch_event_goes_on_with_whichever_comes_first(script_engine):
    xml = definitions(SIGNALS + process("""
      <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="wait" />
      <bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="M_paid" />
        <bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition>
      </bpmn:intermediateCatchEvent>
      <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="e" /><bpmn:endEvent id="e" />"""))
    workflow = workflow_of(deploy.parse_definition(xml), script_engine)
    workflow.do_engine_steps()
    assert [t.task_spec.bpmn_id for t in workflow.get_tasks(state=TaskState.WAITING)] == ["wait"]

    workflow.send_event(bpmn.message_event("paid", {"amount": 3}))
    workflow.do_engine_steps()

    assert workflow.is_completed() and workflow.last_task.data == {"amount": 3}
