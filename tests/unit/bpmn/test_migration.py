"""bpmn.migration: two versions compared by element id, and a workflow moved onto a new version
keeping what it waits at exactly as it was (ids, states, internal data)."""
from __future__ import annotations

from SpiffWorkflow.bpmn.util.diff import SpecDiff, diff_workflow, migrate_workflow
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from bpmn import spiff_internals as spiff
from bpmn.migration import Migration, diff_definitions
from bpmn.serializer import spec_registry
from engine.runtime.outcome import kind_of
from tests.integration.test_migration import chain, process

TIMER = ('<bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition>'
         '<bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>')


def specs_of(*elements: str, beside: str = "") -> tuple:
    """The specs of a process whose ``elements`` follow each other (``beside``: more XML, unchained)."""
    return bpmn.load_spec(deploy.parse_definition(process("p", chain(*elements) + beside)).spec_json)


def waiting_at(specs: tuple, script_engine) -> BpmnWorkflow:
    workflow = BpmnWorkflow(*specs, script_engine=script_engine)
    workflow.do_engine_steps()
    return workflow


def test_diff_definitions_by_element_id():
    v1 = specs_of("startEvent:start", "userTask:review", "endEvent:end")
    v2 = specs_of("startEvent:start", "userTask:review", "manualTask:extra", "endEvent:end")
    assert diff_definitions(v1, v2) == {"added": ["extra"], "removed": [], "changed": ["end", "review"]}
    assert diff_definitions(v2, v1) == {"added": [], "removed": ["extra"], "changed": ["end", "review"]}
    assert diff_definitions(v1, specs_of("startEvent:start", "userTask:review", "endEvent:end")) == {
        "added": [], "removed": [], "changed": []}


def test_a_waiting_user_task_keeps_its_id_state_and_data_and_its_branch_follows_the_new_spec(script_engine):
    v2 = specs_of("startEvent:start", "userTask:review", "userTask:follow_up", "endEvent:end")
    workflow = waiting_at(specs_of("startEvent:start", "userTask:review", "endEvent:end"), script_engine)
    [task] = workflow.get_tasks(state=TaskState.READY, manual=True)
    task.data["draft"] = "kept"
    task.internal_data["baton_mark"] = 1
    migration = Migration(workflow, v2, kind_of)
    assert migration.refusals == []
    migration.apply()
    assert migration.leftovers() == []
    assert workflow.get_task_from_id(task.id) is task and task.state == TaskState.READY
    assert (task.data["draft"], task.internal_data["baton_mark"]) == ("kept", 1)
    assert task.task_spec is v2[0].task_specs["review"]
    assert [child.task_spec.name for child in task.children] == ["follow_up"]
    task.run()
    workflow.do_engine_steps()
    assert [t.task_spec.name for t in workflow.get_tasks(state=TaskState.READY, manual=True)] == ["follow_up"]


def test_a_waiting_timer_keeps_its_due_time(script_engine):
    workflow = waiting_at(specs_of("startEvent:start", TIMER, "endEvent:end"), script_engine)
    [timer] = workflow.get_tasks(state=TaskState.WAITING, spec_name="wait")
    due = dict(timer.internal_data)
    assert due  # SpiffWorkflow keeps the timer's value there
    migration = Migration(workflow, specs_of("startEvent:start", TIMER, "userTask:after", "endEvent:end"), kind_of)
    migration.apply()
    assert timer.state == TaskState.WAITING and timer.internal_data == due


def test_spiffworkflows_own_migration_resets_what_waits_which_is_why_baton_repredicts(script_engine):
    """If SpiffWorkflow's ``migrate_workflow`` ever keeps a waiting task's internal data, Baton may
    use it as it is (bpmn.migration's docstring says why it does not today)."""
    workflow = waiting_at(specs_of("startEvent:start", TIMER, "endEvent:end"), script_engine)
    [timer] = workflow.get_tasks(state=TaskState.WAITING, spec_name="wait")
    timer.internal_data["baton_mark"] = 1
    new_top, new_subs = specs_of("startEvent:start", TIMER, "userTask:after", "endEvent:end")
    top_diff, _subs = diff_workflow(spec_registry(), workflow, new_top, new_subs)
    migrate_workflow(top_diff, workflow, new_top)
    assert "baton_mark" not in timer.internal_data


def test_refusals_name_a_waiting_element_gone_or_of_another_kind(script_engine):
    workflow = waiting_at(specs_of("startEvent:start", "userTask:review", "endEvent:end"), script_engine)
    gone = Migration(workflow, specs_of("startEvent:start", "userTask:other", "endEvent:end"), kind_of)
    assert [str(r) for r in gone.refusals] == ["'review' (userTask, the instance is at) is not in the target version"]
    kind = Migration(workflow, specs_of("startEvent:start", "manualTask:review", "endEvent:end"), kind_of)
    assert [str(r) for r in kind.refusals] == [
        "'review' (the instance is at) is a userTask here and a manualTask in the target version"]


def test_spec_diff_compares_through_the_private_method_spiff_internals_names():
    assert callable(getattr(SpecDiff, "_compare_task_specs", None))


def boundary_timer(attached_to: str) -> str:
    return (f'<bpmn:boundaryEvent id="late" attachedToRef="{attached_to}"><bpmn:timerEventDefinition>'
            '<bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:boundaryEvent>'
            '<bpmn:endEvent id="late_end" /><bpmn:sequenceFlow id="f_late" sourceRef="late" targetRef="late_end" />')


def test_a_waiting_element_that_gains_or_loses_boundary_events_is_refused(script_engine):
    plain = ("startEvent:start", "userTask:review", "endEvent:end")
    workflow = waiting_at(specs_of(*plain), script_engine)
    gains = Migration(workflow, specs_of(*plain, beside=boundary_timer("review")), kind_of)
    assert [str(r) for r in gains.refusals] == [
        "'review' (the instance is at) has other boundary events in the target version (late instead of none); "
        "they are set up when the element opens, so migrate it once it has moved past"]
    guarded = waiting_at(specs_of(*plain, beside=boundary_timer("review")), script_engine)
    loses = Migration(guarded, specs_of(*plain), kind_of)
    assert "'late' (boundaryEvent, the instance is at) is not in the target version" in [str(r) for r in loses.refusals]
    kept = Migration(guarded, specs_of("startEvent:start", "userTask:review", "manualTask:more", "endEvent:end",
                                       beside=boundary_timer("review")), kind_of)
    assert kept.refusals == []
    kept.apply()
    assert kept.leftovers() == []


MULTI = ('<bpmn:userTask id="approve"><bpmn:multiInstanceLoopCharacteristics>'
         '<bpmn:loopDataInputRef>people</bpmn:loopDataInputRef><bpmn:inputDataItem id="person" />'
         '</bpmn:multiInstanceLoopCharacteristics></bpmn:userTask>')


def test_open_instances_of_a_multi_instance_task_migrate_and_finish_on_the_new_spec(script_engine):
    workflow = BpmnWorkflow(*specs_of("startEvent:start", MULTI, "endEvent:end"), script_engine=script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update({"people": ["ann", "bob"]})
    workflow.do_engine_steps()
    opened = workflow.get_tasks(state=TaskState.READY, manual=True)
    assert len(opened) == 2
    opened[0].run()  # one of the two approved before the move
    workflow.do_engine_steps()
    v2 = specs_of("startEvent:start", MULTI, "userTask:after", "endEvent:end")
    migration = Migration(workflow, v2, kind_of)
    assert migration.refusals == []
    migration.apply()
    assert migration.leftovers() == []
    [left] = workflow.get_tasks(state=TaskState.READY, manual=True)
    assert left.id == opened[1].id
    left.run()
    workflow.do_engine_steps()
    assert [t.task_spec.name for t in workflow.get_tasks(state=TaskState.READY, manual=True)] == ["after"]


def test_a_prediction_the_new_flows_do_not_make_is_reported(script_engine, monkeypatch):
    """The safety net under ``apply``: were a waiting task's branch not predicted again (as a
    multi-instance task's was, before ``can_repredict`` looked past its own instances), the
    migration would be refused instead of skipping the new step."""
    workflow = waiting_at(specs_of("startEvent:start", "userTask:review", "endEvent:end"), script_engine)
    monkeypatch.setattr(spiff, "repredict", lambda task: None)
    migration = Migration(workflow, specs_of("startEvent:start", "userTask:review", "userTask:new",
                                             "endEvent:end"), kind_of)
    migration.apply()
    assert migration.leftovers() == ["end"]


def test_diff_definitions_reaches_into_embedded_subprocesses():
    def with_sub(*inner: str) -> tuple:
        sub = f'<bpmn:subProcess id="sub">{chain(*inner)}</bpmn:subProcess>'
        return specs_of("startEvent:start", sub, "endEvent:end")

    v1 = with_sub("startEvent:sub_start", "userTask:inner", "endEvent:sub_end")
    v2 = with_sub("startEvent:sub_start", "userTask:inner", "userTask:inner_more", "endEvent:sub_end")
    assert diff_definitions(v1, v2) == {"added": ["inner_more"], "removed": [], "changed": ["inner", "sub_end"]}
