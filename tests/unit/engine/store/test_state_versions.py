"""Baton's state version: every saved state carries it, older states are migrated step by step on
restore, and a state written by a newer build is refused rather than misread."""
from __future__ import annotations

import json

import pytest

from bpmn import deploy
from engine.errors import BatonError
from engine.store import state_versions, workflows
from tests.harness import bpmn as bpmn_file


@pytest.fixture
def specs():
    parsed = deploy.parse_definition(bpmn_file("wait_for_person.bpmn"))
    return parsed.spec, parsed.subprocess_specs


def _started(specs, script_engine):
    workflow = workflows.new_workflow(specs, script_engine)
    workflow.do_engine_steps()
    return workflow


def test_a_saved_state_carries_the_current_version(specs, script_engine):
    state = json.loads(workflows.dump_workflow(_started(specs, script_engine)))
    assert state[state_versions.VERSION_KEY] == state_versions.CURRENT


def test_an_unversioned_state_is_migrated_on_restore(specs, script_engine):
    state = json.loads(workflows.dump_workflow(_started(specs, script_engine)))
    del state[state_versions.VERSION_KEY]
    restored = workflows.restore_workflow(json.dumps(state), specs, script_engine)
    assert [t.task_spec.bpmn_id for t in restored.get_tasks() if t.task_spec.bpmn_id] != []


def test_each_step_runs_once_in_order(monkeypatch):
    calls = []
    monkeypatch.setattr(state_versions, "CURRENT", 3)
    monkeypatch.setattr(state_versions, "STEPS", {
        1: lambda s: calls.append(1) or {"renamed": s["old"]},
        2: lambda s: calls.append(2) or {**s, "seen": True}})
    upgraded = state_versions.upgrade({state_versions.VERSION_KEY: 1, "old": "x"})
    assert calls == [1, 2] and upgraded == {"renamed": "x", "seen": True}


def test_a_state_of_a_newer_build_is_refused(specs, script_engine):
    state = json.loads(workflows.dump_workflow(_started(specs, script_engine)))
    state[state_versions.VERSION_KEY] = state_versions.CURRENT + 1
    with pytest.raises(BatonError, match="Baton state version"):
        workflows.restore_workflow(json.dumps(state), specs, script_engine)
