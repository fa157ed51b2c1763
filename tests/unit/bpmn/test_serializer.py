"""bpmn/serializer.py: an instance's state written by orjson when it carries every value exactly,
by the standard library otherwise, and read back typed either way (old rows included)."""
from __future__ import annotations

import json
import math
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from bpmn.serializer import VERSION_KEY, _serializers
from bpmn.spiff_internals import encoder_mode

FIXTURES = Path(__file__).resolve().parents[2] / "bpmn"
TYPED = {"id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
         "at": datetime(2026, 11, 28, 10, 15, 30, 123456),
         "at_utc": datetime(2026, 11, 28, 10, 15, tzinfo=timezone.utc),
         "day": date(2026, 11, 28), "clock": time(10, 15, 30), "wait": timedelta(days=2, seconds=5),
         "amount": Decimal("12.50")}


@pytest.fixture(scope="module")
def specs():
    return bpmn.load_spec(deploy.parse_definition((FIXTURES / "camunda_profile.bpmn").read_bytes()).spec_json)


def waiting_at_review(specs, script_engine, start: dict) -> BpmnWorkflow:
    """camunda_profile.bpmn started with ``start`` and stopped at its user task ``review``."""
    workflow = BpmnWorkflow(*specs, script_engine=script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(start)
    workflow.do_engine_steps()
    return workflow


def review(workflow: BpmnWorkflow):
    [task] = workflow.get_tasks(state=TaskState.READY)
    assert task.task_spec.bpmn_id == "review"
    return task


def round_trip(workflow: BpmnWorkflow, specs, script_engine) -> tuple[str, BpmnWorkflow]:
    state = bpmn.workflow_to_json(workflow, {"baton_version": 2})
    return state, bpmn.workflow_from_json(state, *specs, script_engine)


def written_by_orjson(state: str) -> bool:
    return state.startswith('{"serializer_version":"')  # json.dumps puts a space after the colon


def test_a_plain_state_is_written_by_orjson_and_reads_back_equal(specs, script_engine):
    workflow = waiting_at_review(specs, script_engine, {"amount": 70, "tags": ["a", "b"], "ok": True,
                                                        "ratio": 0.25, "note": None, "name": "Zoë ✓"})
    state, restored = round_trip(workflow, specs, script_engine)
    assert written_by_orjson(state)
    assert review(restored).data == review(workflow).data
    assert json.loads(state)["baton_version"] == 2


def test_typed_values_come_back_typed_wherever_the_state_holds_data(specs, script_engine):
    """The start data is stored whole (the root task), a later task's as a delta from its parent,
    plus the workflow's own data and a task's internal data: SpiffWorkflow's registry converts a
    typed value in each, and orjson writes the state."""
    workflow = waiting_at_review(specs, script_engine, {"first": TYPED})
    task = review(workflow)
    task.data["later"] = {"nested": [TYPED]}
    workflow.data["kept"] = TYPED
    task.internal_data["mine"] = TYPED
    state, restored = round_trip(workflow, specs, script_engine)

    assert written_by_orjson(state)
    again = review(restored)
    for value in (again.data["first"], again.data["later"]["nested"][0], restored.data["kept"],
                  again.internal_data["mine"]):
        assert value == TYPED
        assert {key: type(item) for key, item in value.items()} == {key: type(item) for key, item in TYPED.items()}


def test_a_uuid_comes_back_as_a_uuid_not_as_text(specs, script_engine):
    """orjson writes a UUID as a bare string on its own: the registry must have converted it."""
    workflow = waiting_at_review(specs, script_engine, {})
    review(workflow).data["order_id"] = TYPED["id"]
    state, restored = round_trip(workflow, specs, script_engine)
    assert written_by_orjson(state)
    assert '"typename":"UUID"' in state
    assert type(review(restored).data["order_id"]) is uuid.UUID
    assert review(restored).data["order_id"] == TYPED["id"]


def test_saving_converts_copies_never_the_workflows_own_data(specs, script_engine):
    workflow = waiting_at_review(specs, script_engine, {})
    task = review(workflow)
    task.data["inner"] = {"id": TYPED["id"], "list": [TYPED["day"]]}
    inner = task.data["inner"]
    bpmn.workflow_to_json(workflow)
    assert task.data["inner"] is inner and inner == {"id": TYPED["id"], "list": [TYPED["day"]]}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_nan_and_infinity_are_kept_as_the_standard_library_kept_them(specs, script_engine, value):
    """orjson would write null: such a state is written and read by the standard library, as every
    state was before (the runner still refuses the value in the variables: test_failures.py)."""
    workflow = waiting_at_review(specs, script_engine, {})
    review(workflow).data["x"] = value
    state, restored = round_trip(workflow, specs, script_engine)
    assert not written_by_orjson(state)
    assert ("NaN" if math.isnan(value) else "Infinity") in state
    got = review(restored).data["x"]
    assert (math.isnan(got) if math.isnan(value) else got == value)


@pytest.mark.parametrize("value", [2**64, -2**63 - 1, 10**30])
def test_an_integer_past_64_bits_round_trips_exactly(specs, script_engine, value):
    """orjson refuses to write it and reads one back as a float: the standard library does both."""
    workflow = waiting_at_review(specs, script_engine, {})
    review(workflow).data["big"] = value
    state, restored = round_trip(workflow, specs, script_engine)
    assert not written_by_orjson(state)
    assert review(restored).data["big"] == value and type(review(restored).data["big"]) is int


def test_integers_at_the_edges_of_64_bits_are_written_by_orjson(specs, script_engine):
    workflow = waiting_at_review(specs, script_engine, {})
    review(workflow).data["edges"] = [2**64 - 1, -2**63]
    state, restored = round_trip(workflow, specs, script_engine)
    assert written_by_orjson(state)
    assert review(restored).data["edges"] == [2**64 - 1, -2**63]


def test_a_lone_surrogate_and_non_text_keys_are_kept_as_before(specs, script_engine):
    workflow = waiting_at_review(specs, script_engine, {})
    review(workflow).data.update({"text": "a\ud800b", "by_number": {1: "one"}})
    state, restored = round_trip(workflow, specs, script_engine)
    assert not written_by_orjson(state)
    assert review(restored).data["text"] == "a\ud800b"
    assert review(restored).data["by_number"] == {"1": "one"}  # what json.dumps always made of it


def nested(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("levels", [200, 300])
def test_nesting_is_kept_as_before_below_and_past_orjsons_limit(specs, script_engine, levels):
    """Scripts may build values deeper than the doors' 64 levels (the runner refuses them in the
    variables); the state keeps them, orjson up to its limit, the standard library past it."""
    workflow = waiting_at_review(specs, script_engine, {})
    review(workflow).data["deep"] = nested(levels)
    state, restored = round_trip(workflow, specs, script_engine)
    assert written_by_orjson(state) is (levels == 200)
    assert review(restored).data["deep"] == nested(levels)


def test_nesting_that_failed_to_restore_before_still_fails_the_same_way(specs, script_engine):
    """Past ~490 levels SpiffWorkflow's registry recursion fails on restore, as it always did."""
    workflow = waiting_at_review(specs, script_engine, {})
    review(workflow).data["deep"] = nested(600)
    state = bpmn.workflow_to_json(workflow)
    assert not written_by_orjson(state)
    with pytest.raises(RecursionError):
        bpmn.workflow_from_json(state, *specs, script_engine)


def old_state(workflow: BpmnWorkflow) -> str:
    """The state as the serializer wrote it before orjson: json.dumps with SpiffWorkflow's encoder,
    the version keys last."""
    _full, serializer, encoder = _serializers()
    with encoder_mode(serializer.registry):
        dct = serializer.to_dict(workflow)
        dct[VERSION_KEY] = serializer.VERSION
        dct["baton_version"] = 2
        return json.dumps(dct, cls=encoder)


def test_a_state_written_by_the_standard_library_before_orjson_still_loads(specs, script_engine):
    workflow = waiting_at_review(specs, script_engine, {"first": TYPED, "big": 2**70})
    review(workflow).data["nan"] = float("nan")
    state = old_state(workflow)
    assert state.startswith('{"data": ')
    restored = bpmn.workflow_from_json(state, *specs, script_engine)
    again = review(restored)
    assert again.data["first"] == TYPED and type(again.data["first"]["id"]) is uuid.UUID
    assert again.data["big"] == 2**70 and math.isnan(again.data["nan"])
    again.data["decision"] = "approve"
    again.run()
    restored.do_engine_steps()
    assert [t.task_spec.bpmn_id for t in restored.get_tasks(state=TaskState.READY)] == ["pack"]
