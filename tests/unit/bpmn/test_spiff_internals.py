"""The contract of bpmn/spiff_internals.py: each private part of SpiffWorkflow that Baton relies
on still exists and behaves as Baton assumes. A SpiffWorkflow upgrade that changes one fails here,
with the name of what changed, before any instance fails."""
from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import pkgutil
import textwrap
import uuid
from pathlib import Path

import pytest
import SpiffWorkflow
from SpiffWorkflow.bpmn.serializer.default.workflow import BpmnWorkflowConverter
from SpiffWorkflow.bpmn.serializer.workflow import BpmnWorkflowSerializer
from SpiffWorkflow.bpmn.specs.bpmn_process_spec import BpmnProcessSpec
from SpiffWorkflow.bpmn.specs.event_definitions.base import EventDefinition
from SpiffWorkflow.bpmn.specs.event_definitions.timer import CycleTimerEventDefinition
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
import engine
from bpmn import spiff_internals as spiff
from bpmn.serializer import _serializers

FIXTURES = Path(__file__).resolve().parents[2] / "bpmn"


def started(name: str, script_engine, start: dict | None = None) -> BpmnWorkflow:
    specs = bpmn.load_spec(deploy.parse_definition((FIXTURES / name).read_bytes()).spec_json)
    workflow = BpmnWorkflow(*specs, script_engine=script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(start or {})
    workflow.do_engine_steps()
    return workflow


@pytest.fixture
def with_subprocess(script_engine) -> BpmnWorkflow:
    """A running event subprocess (a subprocess of the workflow) whose duration timer waits."""
    workflow = started("cov_event_subprocess_timer.bpmn", script_engine)
    assert workflow.subprocesses and not workflow.is_completed()
    return workflow


def test_the_installed_spiffworkflow_is_the_version_this_contract_was_checked_against():
    assert SpiffWorkflow.__version__ == "3.2.0", (
        "SpiffWorkflow changed: review bpmn/spiff_internals.py against it (every test here), then "
        "update this version")


# --- a task's links ---------------------------------------------------------------------------------

def test_the_link_ids_are_what_the_public_parent_and_children_look_up(with_subprocess):
    for task in with_subprocess.get_tasks():
        assert spiff.parent_id(task) == (task.parent.id if task.parent is not None else None)
        assert spiff.child_ids(task) == [child.id for child in task.children]


def test_setting_the_link_ids_moves_a_task_as_the_public_properties_see_it(script_engine):
    workflow = started("webhook_order.bpmn", script_engine, {"amount": 60})
    root = workflow.task_tree
    last = workflow.last_task
    spiff.set_parent_id(last, root.id)
    spiff.set_child_ids(root, [*spiff.child_ids(root), last.id])
    assert last.parent is root and root.children[-1] is last


# --- internal data ------------------------------------------------------------------------------------

def test_a_waiting_timers_event_value_is_the_one_spiffworkflow_reports_and_reads(with_subprocess):
    [waiting] = with_subprocess.waiting_events()
    [timer] = [t for t in with_subprocess.get_tasks(state=TaskState.WAITING)
               if t.task_spec.event_definition.__class__.__name__ == waiting.event_type]
    assert spiff.event_value(timer) == waiting.value and isinstance(waiting.value, str)
    spiff.set_event_value(timer, "2000-01-01T00:00:00+00:00")  # due long ago
    assert timer.task_spec.event_definition.has_fired(timer)


def test_an_ended_cycle_counts_as_fired_and_has_no_value(with_subprocess):
    [timer] = [t for t in with_subprocess.get_tasks(state=TaskState.WAITING) if spiff.event_value(t)]
    spiff.end_cycle(timer)
    assert spiff.event_value(timer) is None
    assert EventDefinition.has_fired(timer.task_spec.event_definition, timer)


# --- stepping -----------------------------------------------------------------------------------------

def test_inherit_data_merges_the_parents_data_into_the_tasks(script_engine):
    workflow = started("webhook_order.bpmn", script_engine, {"amount": 60})
    task = workflow.last_task
    task.parent.data = {"from_parent": 1, "both": "parent"}
    task.data = {"own": 2, "both": "own"}
    spiff.inherit_data(task)
    assert task.data == {"from_parent": 1, "own": 2, "both": "parent"}


def test_update_makes_a_caught_event_ready_as_spiffworkflows_own_catch_does(with_subprocess):
    [timer] = [t for t in with_subprocess.get_tasks(state=TaskState.WAITING) if spiff.event_value(t)]
    spiff.set_event_value(timer, "2000-01-01T00:00:00+00:00")
    spiff.update(timer)
    assert timer.state == TaskState.READY


def test_a_process_specs_end_is_the_join_baton_swaps_for_its_scope_end():
    assert type(BpmnProcessSpec("p").end) is spiff.EndJoin


# --- serializing -------------------------------------------------------------------------------------

def test_in_encoder_mode_the_registry_leaves_data_values_as_python_objects():
    registry = _serializers()[1].registry
    value = uuid.uuid4()
    assert registry._encoder_mode is False
    assert registry.convert({"id": value}) == {"id": {"value": str(value), "typename": "UUID"}}
    with spiff.encoder_mode(registry):
        assert registry.convert({"id": value}) == {"id": value}
    assert registry._encoder_mode is False


def test_the_serialized_layout_has_data_only_where_data_slots_looks(with_subprocess):
    """A new key in SpiffWorkflow's dicts may hold data that no registry conversion reaches."""
    serializer = _serializers()[1]
    with spiff.encoder_mode(serializer.registry):
        state = serializer.to_dict(with_subprocess)
    assert set(state) == spiff.WORKFLOW_KEYS | {"subprocesses", "bpmn_events", "typename"}
    [sub] = state["subprocesses"].values()
    assert set(sub) == spiff.SUBPROCESS_KEYS | {"typename"}
    slots = {(id(holder), key) for holder, key in spiff.data_slots(state)}
    for workflow in (state, sub):
        for task in workflow["tasks"].values():
            assert set(task) == spiff.TASK_KEYS | {"typename"}
            for key, value in task.items():
                if (id(task), key) not in slots:
                    assert isinstance(value, (str, int, float, bool, type(None))) or (
                        isinstance(value, list) and all(isinstance(item, str) for item in value)), key
    for key in spiff.WORKFLOW_KEYS - set(spiff.WORKFLOW_DATA_KEYS) - {"tasks"}:
        assert isinstance(state[key], (str, int, bool, type(None))), key


def source_hash(function) -> str:
    return hashlib.sha256(textwrap.dedent(inspect.getsource(function)).encode()).hexdigest()[:16]


# What Baton copies: its copy must be compared with SpiffWorkflow's new code, then the hash updated.
COPIED = {
    "BpmnWorkflowConverter.to_dict": (BpmnWorkflowConverter.to_dict, "12fff211b41f0d8b",
                                      "spiff_internals.SpeclessWorkflowConverter.to_dict"),
    "BpmnWorkflowConverter.from_dict": (BpmnWorkflowConverter.from_dict, "a00982f4e6902232",
                                        "spiff_internals.SpeclessWorkflowConverter.from_dict"),
    "BpmnWorkflowSerializer.serialize_json": (BpmnWorkflowSerializer.serialize_json, "cffc776c51d73d54",
                                              "serializer.workflow_to_json"),
    "_EndJoin._check_threshold_unstructured": (spiff.EndJoin._check_threshold_unstructured, "f2809813298cf9e1",
                                               "scopes.ScopeEndJoin._check_threshold_unstructured"),
    "CycleTimerEventDefinition.cycle_complete": (CycleTimerEventDefinition.cycle_complete, "eb745a102c307bb9",
                                                 "cron.CronCycleDefinition.cycle_complete"),
    "Task._set_state": (spiff._SPIFF_SET_STATE, "6eef1b00f1029874", "spiff_internals._set_state"),
}


@pytest.mark.parametrize("name", COPIED)
def test_what_baton_copies_from_spiffworkflow_is_unchanged_there(name):
    function, pinned, copy = COPIED[name]
    assert source_hash(function) == pinned, f"SpiffWorkflow's {name} changed: compare bpmn/{copy} with it"


# --- private hooks Baton's task specs override --------------------------------------------------------

OWN_HELPERS = {"_drop_items"}  # private methods of Baton's own, which SpiffWorkflow never calls


def baton_classes_on_spiffworkflow() -> list[type]:
    found = []
    for package in (bpmn, engine):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            found += [cls for cls in vars(module).values() if inspect.isclass(cls)
                      and cls.__module__ == module.__name__
                      and any(base.__module__.startswith("SpiffWorkflow.") for base in cls.__mro__)]
    return found


def test_every_private_method_baton_overrides_still_exists_in_spiffworkflow():
    """An override of a hook SpiffWorkflow renamed or dropped would silently never run."""
    checked = 0
    for cls in baton_classes_on_spiffworkflow():
        spiff_bases = [base for base in cls.__mro__ if base.__module__.startswith("SpiffWorkflow.")]
        ours = [base for base in cls.__mro__ if base.__module__.split(".")[0] in ("bpmn", "engine")]
        for own in ours:
            for name, member in vars(own).items():
                if not name.startswith("_") or name.startswith("__") or not callable(member) or name in OWN_HELPERS:
                    continue
                assert any(name in vars(base) for base in spiff_bases), \
                    f"{own.__module__}.{own.__qualname__}.{name} overrides nothing in SpiffWorkflow any more"
                checked += 1
    assert checked >= 8  # _run_hook, _update_hook, _execute, _check_threshold_unstructured ...


# --- state changes logged only when written ------------------------------------------------------------

def _run_states(name: str, script_engine) -> list[tuple[str, str]]:
    specs = bpmn.load_spec(deploy.parse_definition((FIXTURES / name).read_bytes()).spec_json)
    workflow = BpmnWorkflow(*specs, script_engine=script_engine)
    workflow.do_engine_steps()
    return sorted((task.task_spec.name, TaskState.get_name(task.state)) for task in workflow.get_tasks())


def test_the_quiet_state_change_leaves_every_task_in_the_state_spiffworkflows_own_does(caplog, script_engine):
    spiff.state_changes_log_as_spiffworkflow_does()
    try:
        theirs = _run_states("wait_for_person.bpmn", script_engine)
    finally:
        spiff.log_state_changes_only_when_written()
    assert _run_states("wait_for_person.bpmn", script_engine) == theirs


def test_the_quiet_state_change_still_writes_the_log_when_it_is_enabled(caplog, script_engine):
    spiff.log_state_changes_only_when_written()
    with caplog.at_level(logging.INFO, logger="spiff.task"):
        _run_states("wait_for_person.bpmn", script_engine)
    changes = [record for record in caplog.records if record.name == "spiff.task"]
    assert changes and all(record.getMessage().startswith("State changed to ") for record in changes)
    assert {"task_spec", "task_id", "state", "elapsed", "parent"} <= set(vars(changes[0]))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spiff.task"):
        _run_states("wait_for_person.bpmn", script_engine)
    assert not [record for record in caplog.records if record.name == "spiff.task"]


def test_repredict_rebuilds_the_predicted_branch_below_a_waiting_task_and_keeps_the_task(with_subprocess):
    """``repredict`` leans on ``Task._drop_children``, ``Task._state`` and ``TaskSpec._predict``:
    what it leaves must be the branch SpiffWorkflow's own prediction makes for a task that waits."""
    workflow = with_subprocess
    waiting = [t for t in workflow.get_tasks() if t.has_state(TaskState.READY | TaskState.WAITING)
               and all(c.has_state(TaskState.PREDICTED_MASK | TaskState.FUTURE) for c in t.children)]
    assert waiting
    for task in waiting:
        before = (task.id, task.state, task.last_state_change, dict(task.internal_data),
                  [(c.task_spec.name, c.state) for c in task.children])
        spiff.repredict(task)
        assert (task.id, task.state, task.last_state_change, dict(task.internal_data),
                [(c.task_spec.name, c.state) for c in task.children]) == before
        assert all(child.id in task.workflow.tasks for child in task.children)


def test_compare_specs_is_spec_diffs_own_comparison():
    from SpiffWorkflow.bpmn.util.diff import SpecDiff

    from bpmn.serializer import spec_registry
    spec, _subprocesses = bpmn.load_spec(deploy.parse_definition((FIXTURES / "webhook_order.bpmn").read_bytes()).spec_json)
    diff = SpecDiff(spec_registry(), spec, spec)
    some = next(iter(spec.task_specs.values()))
    assert spiff.compare_specs(diff, some, some) == []
    assert diff.changed == {}
