"""Pruning finished tasks before a save (``engine.store.pruning``): the tree of an instance that
loops stays the same size however long it runs, the instance behaves as with its whole tree (same
variables, output keys, end), and ``process.path`` reads the same path from the pruned tree plus the
logged rows as from the whole tree. The workflows run in memory with Baton's script engine and
save/restore round trips, as the runner does (``outcome.summarize`` prunes and serializes)."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from SpiffWorkflow.util.task import TaskState

from bpmn import message_event
from engine.insight import read_path
from engine.runtime.outcome import summarize
from engine.store import pruning, state_versions, workflows
from engine.store.db import db
from engine.store.workflows import SpecCache
from tests.unit.conftest import deploy_for_new_tenant

TOUR = ["go", "b2", "b1", "b3"]  # the subprocess's wait, then the three branches into the join


@pytest.fixture
def deployed(app, uow):
    """The tour process deployed for a new tenant, and a spec cache to read it with."""
    with app.app_context():
        tenant_id, answer = deploy_for_new_tenant(uow, "pruning_tour.bpmn")
        cache = SpecCache()
        yield tenant_id, answer["definition_id"], cache, cache.get(uow, tenant_id, answer["definition_id"])
        uow.rollback()
        db.session.remove()


def _start(specs, script_engine, target: int):
    workflow = workflows.new_workflow(specs, script_engine)
    workflow.get_next_task(state=TaskState.READY).data.update({"counter": 0, "target": target})
    workflow.do_engine_steps()
    return workflow


def _pruned_run(specs, script_engine, messages: list[str], target: int, on_save=None):
    """Each message applied and saved as the runner does: summarize (prunes), then restore."""
    workflow, logged = _start(specs, script_engine, target), []
    outcome = summarize(workflow, None)
    logged += outcome.steps
    for number, name in enumerate(messages, start=1):
        workflow = workflows.restore_workflow(outcome.state, specs, script_engine)
        workflow.send_event(message_event(name))
        workflow.do_engine_steps()
        outcome = summarize(workflow, None)
        logged += outcome.steps
        if on_save is not None:
            on_save(number, outcome)
    return outcome, logged


def _whole_run(specs, script_engine, messages: list[str], target: int) -> str:
    """The same with the whole tree saved each time (what version 1 of the state was)."""
    workflow = _start(specs, script_engine, target)
    for name in messages:
        workflow = workflows.restore_workflow(workflows.dump_workflow(workflow), specs, script_engine)
        workflow.send_event(message_event(name))
        workflow.do_engine_steps()
    return workflows.dump_workflow(workflow)


def _shape(steps, flows):
    return [(s.element["element_id"], s.state) for s in steps], set(flows)


def test_a_loop_keeps_a_tree_of_one_size_however_many_passes_it_made(deployed, script_engine, uow):
    tenant_id, definition_id, cache, specs = deployed
    passes = 300  # past the depth where the whole tree failed (~266 passes of three elements)
    sizes = {}

    def measure(number, outcome):
        sizes[number - len(TOUR)] = (len(json.loads(outcome.state)["tasks"]), len(outcome.state))

    outcome, logged = _pruned_run(specs, script_engine, TOUR + ["tick"] * passes, passes, on_save=measure)

    assert outcome.status == "completed" and outcome.variables["counter"] == passes
    assert outcome.output_keys == ["counter"]
    early = [sizes[n] for n in range(10, 60)]
    late = [sizes[n] for n in range(passes - 50, passes)]
    assert max(tasks for tasks, _ in late) <= max(tasks for tasks, _ in early) <= pruning.PRUNE_ABOVE + 5
    assert max(size for _, size in late) <= 1.1 * max(size for _, size in early)
    assert not json.loads(outcome.state)["subprocesses"]  # the finished subprocess went with its task
    # Every element passed is in the rows or the tree, exactly once.
    steps, _ = read_path(uow, cache, tenant_id, definition_id, outcome.state, logged)
    passed = Counter(s.element["element_id"] for s in steps if s.state == "completed")
    assert passed["wait"] == passed["count"] == passed["again"] == passes
    assert passed["start"] == passed["end"] == passed["join"] == 1


def test_the_path_read_from_a_pruned_tree_and_its_rows_is_the_whole_trees(deployed, script_engine, uow):
    tenant_id, definition_id, cache, specs = deployed
    for messages, target in ((TOUR + ["tick"] * 30, 30), (TOUR + ["tick"] * 17, 30), (TOUR[:2], 5)):
        outcome, logged = _pruned_run(specs, script_engine, messages, target)
        whole = _whole_run(specs, script_engine, messages, target)

        pruned_path = read_path(uow, cache, tenant_id, definition_id, outcome.state, logged)
        whole_path = read_path(uow, cache, tenant_id, definition_id, whole, [])

        assert _shape(*pruned_path) == _shape(*whole_path), messages
        assert len(outcome.state) < len(whole) or len(messages) < len(TOUR)
        steps, flows = pruned_path
        assert {("r1", "join"), ("r2", "join"), ("r3", "join"), ("inner_start", "inner_wait")} <= set(flows) \
            or len(messages) < len(TOUR)


def test_a_whole_tree_of_version_1_loads_and_is_pruned_by_its_next_save(deployed, script_engine, uow):
    tenant_id, definition_id, cache, specs = deployed
    messages = TOUR + ["tick"] * 20
    whole = json.loads(_whole_run(specs, script_engine, messages, 30))
    whole[state_versions.VERSION_KEY] = 1  # as the build before pruning wrote it
    old_state = json.dumps(whole)
    old_path = read_path(uow, cache, tenant_id, definition_id, old_state, [])

    workflow = workflows.restore_workflow(old_state, specs, script_engine)
    workflow.send_event(message_event("tick"))
    workflow.do_engine_steps()
    outcome = summarize(workflow, None)

    assert outcome.steps and len(outcome.state) < len(old_state) / 2
    assert json.loads(outcome.state)[state_versions.VERSION_KEY] == state_versions.CURRENT == 2
    new_steps, new_flows = read_path(uow, cache, tenant_id, definition_id, outcome.state, outcome.steps)
    passed = Counter(s.element["element_id"] for s in new_steps if s.state == "completed")
    old_passed = Counter(s.element["element_id"] for s in old_path[0] if s.state == "completed")
    assert passed - old_passed == Counter({"wait": 1, "count": 1, "again": 1})
    assert set(old_path[1]) == set(new_flows)


def test_a_failed_task_and_the_parent_it_restarts_from_are_kept(deployed, script_engine):
    _tenant, _definition, _cache, specs = deployed
    workflow = _start(specs, script_engine, 3)
    for name in TOUR:
        workflow.send_event(message_event(name))
        workflow.do_engine_steps()
    waiting = workflow.get_next_task(state=TaskState.WAITING, spec_name="wait")
    waiting.error()  # as a failure leaves it

    pruning.prune(workflow)

    assert waiting.id in workflow.tasks and waiting.parent is not None
    assert waiting.parent.task_spec.bpmn_id == "join"  # its data is what a retry starts from
