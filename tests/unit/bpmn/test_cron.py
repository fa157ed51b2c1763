"""bpmn.cron: Camunda's Quartz cron cycles, evaluated in UTC, and the cycle timer that follows one."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy, spiff_internals
from bpmn.cron import Cron
from tests.unit.bpmn.refusals import refusal


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


@pytest.mark.parametrize("cron, after, expected", [
    ("0 0 9 * * ?", "2026-03-02T08:59:59", "2026-03-02T09:00:00"),
    ("0 0 9 * * ?", "2026-03-02T09:00:00", "2026-03-03T09:00:00"),      # strictly after
    ("0/5 0/1 * 1/1 * ?", "2026-03-02T10:00:03", "2026-03-02T10:00:05"),  # the Camunda examples' schedule
    ("0 30 8 ? * MON-FRI", "2026-03-06T09:00:00", "2026-03-09T08:30:00"),  # Friday after 8:30 -> Monday
    ("0 0 12 ? * 2", "2026-03-02T12:00:00", "2026-03-09T12:00:00"),      # 2 is Monday in Quartz
    ("0 0 0 L * ?", "2026-02-10T00:00:00", "2026-02-28T00:00:00"),       # last day of the month
    ("0 0 0 29 2 ?", "2026-03-01T00:00:00", "2028-02-29T00:00:00"),      # the next leap day
    ("0 15,45 * * * ?", "2026-03-02T10:20:00", "2026-03-02T10:45:00"),
    ("0 0 6-8/2 * * ?", "2026-03-02T06:00:00", "2026-03-02T08:00:00"),
    ("0 0 0 1 JAN ? 2030", "2026-03-02T00:00:00", "2030-01-01T00:00:00"),
])
def test_the_next_firing_follows_quartz(cron, after, expected):
    assert Cron.parse(cron).next_after(at(after)) == at(expected)


def test_a_schedule_that_never_comes_again_has_no_next_firing():
    assert Cron.parse("0 0 0 1 1 ? 1999").next_after(at("2026-01-01T00:00:00")) is None
    assert Cron.parse("0 0 0 30 2 ?").next_after(at("2026-01-01T00:00:00")) is None


@pytest.mark.parametrize("cron, problem", [
    ("0 0 9 * *", "has 6 or 7 fields"),
    ("0 0 25 * * ?", "the hour value 25 is outside 0 to 23"),
    ("0 0 9 15 * MON", "give a day of month or a day of week"),
    ("0 0 9 ? * 2#1", "uses W, # or L"),
    ("0 0 9 LW * ?", "uses W, # or L"),
    ("0 0 9 ? * 9-2", "the day of week value 9 is outside 1 to 7"),
    ("0 0 x * * ?", "the hour field has 'x'"),
    ("0 0 9-5 * * ?", "the hour range '9-5' runs backwards"),
])
def test_a_cron_outside_what_baton_reads_is_refused_naming_the_field(cron, problem):
    with pytest.raises(ValueError) as caught:
        Cron.parse(cron)
    assert problem in str(caught.value)


def start_with(cycle: str) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?><bpmn:definitions '
            'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d">\n'
            '<bpmn:process id="p" isExecutable="true">\n'
            f'<bpmn:startEvent id="tick"><bpmn:timerEventDefinition><bpmn:timeCycle>{cycle}</bpmn:timeCycle>'
            '</bpmn:timerEventDefinition></bpmn:startEvent>\n'
            '<bpmn:sequenceFlow id="f" sourceRef="tick" targetRef="e" /><bpmn:endEvent id="e" />\n'
            "</bpmn:process></bpmn:definitions>")


def test_a_cron_timer_start_is_scheduled_by_its_cron():
    [timer] = deploy.parse_definition(start_with("0 0 9 * * ?")).timer_starts
    assert (timer.element_id, timer.kind, timer.expression) == ("tick", "cron", '"0 0 9 * * ?"')


def test_an_unreadable_cron_is_refused_at_its_line():
    [error] = refusal(start_with("0 0 9 * * MON ?"))
    assert (error["element_id"], error["line"]) == ("tick", 3)
    assert error["message"] == ("startEvent timeCycle '0 0 9 * * MON ?' is not a cron expression Baton reads: "
                                "the year field has '?', which is not a number from 1970 to 2199.")


def test_a_non_interrupting_cron_boundary_fires_each_time_while_its_task_waits(script_engine):
    xml = ('<?xml version="1.0" encoding="UTF-8"?><bpmn:definitions '
           'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d"><bpmn:process id="p" isExecutable="true">'
           '<bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="work" />'
           '<bpmn:userTask id="work" /><bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="e" />'
           '<bpmn:endEvent id="e" />'
           '<bpmn:boundaryEvent id="remind" attachedToRef="work" cancelActivity="false">'
           '<bpmn:timerEventDefinition><bpmn:timeCycle>* * * * * ?</bpmn:timeCycle></bpmn:timerEventDefinition>'
           '</bpmn:boundaryEvent><bpmn:sequenceFlow id="f3" sourceRef="remind" targetRef="note" />'
           '<bpmn:scriptTask id="note"><bpmn:script>reminded = True</bpmn:script></bpmn:scriptTask>'
           '<bpmn:sequenceFlow id="f4" sourceRef="note" targetRef="ne" /><bpmn:endEvent id="ne" />'
           "</bpmn:process></bpmn:definitions>")
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(xml).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
    workflow.do_engine_steps()
    [remind] = [t for t in workflow.get_tasks(state=TaskState.WAITING) if t.task_spec.bpmn_id == "remind"]
    assert remind.internal_data["event_value"]["next"] > datetime.now(timezone.utc).isoformat()[:19]
    for _ in range(2):
        # A clock moved on, without waiting for it: the cycle's next time is put in the past.
        [remind] = [t for t in workflow.get_tasks(state=TaskState.WAITING) if t.task_spec.bpmn_id == "remind"]
        value = spiff_internals.event_value(remind)
        value["next"] = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
        spiff_internals.set_event_value(remind, value)
        workflow = bpmn.workflow_from_json(bpmn.workflow_to_json(workflow), spec, subprocess_specs, script_engine)
        workflow.refresh_timers()
        workflow.do_engine_steps()
    notes = [t for t in workflow.get_tasks() if t.task_spec.bpmn_id == "note" and t.state == TaskState.COMPLETED]
    assert len(notes) >= 2  # fired each time its time had come while the user task waits
    assert not workflow.is_completed()


# -- SpiffArena's timedelta(...) ---------------------------------------------------------------------

def catch_with(kind: str, value: str) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?><bpmn:definitions '
            'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d">\n'
            '<bpmn:process id="p" isExecutable="true"><bpmn:startEvent id="s" />'
            '<bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="wait" />\n'
            f'<bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition><bpmn:{kind}>{value}</bpmn:{kind}>'
            '</bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>'
            '<bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="e" /><bpmn:endEvent id="e" />'
            "</bpmn:process></bpmn:definitions>")


@pytest.mark.parametrize("value, expression", [
    ("timedelta(seconds=.25)", '"PT0.25S"'),
    ("timedelta(hours=1, days=1)", '"PT90000S"'),
    ("timedelta(1, 30)", '"PT86430S"'),
    ("timedelta(minutes=delay)", '"PT" + str((delay) * 60) + "S"'),
])
def test_a_spiffarena_timedelta_duration_is_stored_as_iso_8601(value, expression):
    spec = deploy.parse_definition(catch_with("timeDuration", value)).spec
    assert spec.task_specs["wait"].event_definition.expression == expression


def test_a_computed_timedelta_waits_as_long_as_the_variables_say(script_engine):
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(
        catch_with("timeDuration", "timedelta(minutes=delay)")).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data["delay"] = 90
    workflow.do_engine_steps()
    [waiting] = [t for t in workflow.get_tasks(state=TaskState.WAITING) if t.task_spec.bpmn_id == "wait"]
    due = datetime.fromisoformat(waiting.internal_data["event_value"])
    assert 5390 < (due - datetime.now(timezone.utc)).total_seconds() <= 5400


@pytest.mark.parametrize("kind, value, message", [
    ("timeDuration", "timedelta(fortnights=1)", "timedelta has no parameter 'fortnights'"),
    ("timeDate", "timedelta(days=1)", "a timedelta is a duration; put it in a timeDuration element"),
    ("timeDuration", "timedelta(seconds=-5)", "the duration is negative"),
])
def test_a_timedelta_that_cannot_be_rewritten_is_refused(kind, value, message):
    [error] = refusal(catch_with(kind, value))
    assert error["element_id"] == "wait"
    assert message in error["message"]


def test_a_timedelta_cycle_becomes_an_iso_cycle():
    from bpmn.timers import _normalize
    assert _normalize("timeCycle", "(2, timedelta(seconds=0.1))") == ('"R2/PT0.1S"', None)


def test_a_cron_timer_start_is_scheduled_at_its_next_firing():
    from engine.runtime.timer_starts import first_run
    due, runs, interval = first_run("cron", '"0 0 9 * * ?"')
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    assert (due.hour, due.minute, due.second) == (9, 0, 0) and 0 < (due - now).total_seconds() <= 86400
    assert (runs, interval) == (-1, 0.0)  # no count: the next one is computed from the cron each time
    with pytest.raises(ValueError):
        first_run("cron", '"0 0 0 1 1 ? 1999"')
