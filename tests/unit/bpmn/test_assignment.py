"""bpmn.assignment: Camunda's assignment, due date and priority attributes as deploy reads them, and
the run-time values they give (engine.runtime.task_assignment)."""
from __future__ import annotations

from datetime import datetime

import pytest
from lxml import etree

from bpmn.assignment import instant, read_assignment
from engine.runtime.task_assignment import audience, evaluate_assignment

CREATED = datetime(2026, 11, 28, 10, 0, 0)


def task(attributes: str = "", extension: str = "") -> etree._Element:
    xml = f"""<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
      xmlns:camunda="http://camunda.org/schema/1.0/bpmn" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0">
      <bpmn:process id="p"><bpmn:userTask id="t" {attributes}>
      <bpmn:extensionElements>{extension}</bpmn:extensionElements></bpmn:userTask></bpmn:process>
      </bpmn:definitions>"""
    return etree.fromstring(xml).find(".//{http://www.omg.org/spec/BPMN/20100524/MODEL}userTask")


def test_literals_expressions_and_templates_are_read_into_settings():
    settings, problems = read_assignment(task(
        'camunda:assignee="${boss}" camunda:candidateGroups="sales, team-${region}, {{ extra }}" '
        'camunda:priority="${urgent ? 90 : 20}" camunda:dueDate="P2DT4H"'))
    assert problems == []
    assert settings["assignee"] == {"expression": "boss"}
    assert settings["candidate_groups"] == [{"text": "sales"}, {"template": "team-{{ region }}"},
                                            {"template": "{{ extra }}"}]
    assert settings["priority"] == {"expression": "(90 if urgent else 20)"}
    assert settings["due"] == {"text": "P2DT4H"}


def test_camunda_8_writes_the_same_in_zeebe_elements_with_feel():
    settings, problems = read_assignment(task(extension=(
        '<zeebe:assignmentDefinition assignee="=owner" candidateGroups="ops" />'
        '<zeebe:taskSchedule dueDate="2026-12-01T17:00:00Z" /><zeebe:priorityDefinition priority="75" />')))
    assert problems == []
    assert settings == {"assignee": {"expression": "owner"}, "candidate_groups": [{"text": "ops"}],
                        "due": {"text": "2026-12-01T17:00:00Z"}, "priority": {"text": "75"}}


@pytest.mark.parametrize("attributes, phrase", [
    ('camunda:priority="high"', "a priority is a whole number"),
    ('camunda:priority="-1"', "from 0 to 100"),
    ('camunda:followUpDate="P"', "not an ISO 8601 duration"),
    ('camunda:dueDate="P1000Y"', "longer than 100 years"),
    ('camunda:assignee="${user.name()}"', "the method call name(...)"),
    ('camunda:candidateUsers="${a} and ${b.c(}"', "cannot be read"),
])
def test_what_cannot_be_evaluated_is_a_problem_naming_the_attribute(attributes, phrase):
    _settings, problems = read_assignment(task(attributes))
    assert len(problems) == 1 and phrase in problems[0] and problems[0].startswith("camunda:")


def test_values_are_evaluated_with_the_task_variables_and_failures_leave_fields_unset():
    settings, _ = read_assignment(task(
        'camunda:assignee="${boss}" camunda:candidateUsers="${team}" camunda:candidateGroups="g-${region}" '
        'camunda:dueDate="${due}" camunda:followUpDate="PT30M" camunda:priority="${level}"'))
    values = evaluate_assignment(settings, {"boss": "ann", "team": ["bob", "cy", "bob"], "region": "eu",
                                            "due": "2026-12-01T12:00:00+01:00", "level": "80"}, CREATED, "t")
    assert (values.assignee, values.candidate_users, values.candidate_groups) == ("ann", ["bob", "cy"], ["g-eu"])
    assert values.due_at == datetime(2026, 12, 1, 11, 0) and values.follow_up_at == datetime(2026, 11, 28, 10, 30)
    assert values.priority == 80
    missing = evaluate_assignment(settings, {"team": "dee, eli", "level": 500}, CREATED, "t")
    assert missing.assignee is None and missing.candidate_users == ["dee", "eli"] and missing.due_at is None
    assert missing.priority == 50 and missing.candidate_groups == []


def test_a_held_task_is_for_its_holder_alone_an_unheld_one_for_each_candidate():
    assert audience("ann", ["bob"], ["sales"]) == ["u:ann"]
    assert audience(None, ["bob"], ["sales", "ops"]) == ["u:bob", "g:sales", "g:ops"]


def test_a_duration_counts_from_the_task_creation_and_a_zoneless_time_is_utc():
    assert instant("P1M", datetime(2026, 1, 31)) == datetime(2026, 3, 3)
    assert instant("2026-12-01T08:00:00", CREATED) == datetime(2026, 12, 1, 8)
    with pytest.raises(ValueError):
        instant(42, CREATED)
