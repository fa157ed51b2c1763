"""bpmn/: hardened reading, Baton's profile, deploy validation and (de)serialization."""
from __future__ import annotations

import json
import logging
import time
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.spiff.parser.process import SpiffBpmnParser
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from bpmn import allowlist
from bpmn.issues import INTERNAL_MESSAGE
from bpmn.parser import BatonBpmnParser
from engine.errors import BatonError, BpmnValidationError
from engine.sandbox import Sandbox, SandboxScriptEngine
from tests.unit.bpmn.refusals import refusal

FIXTURES = Path(__file__).resolve().parents[2] / "bpmn"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def by_element(errors: list[dict]) -> dict[str | None, list[dict]]:
    found: dict[str | None, list[dict]] = {}
    for error in errors:
        found.setdefault(error["element_id"], []).append(error)
    return found


@pytest.fixture(scope="module")
def script_engine():
    sandbox = Sandbox(timeout_s=5, memory_mb=256, hosts=1)
    yield SandboxScriptEngine(sandbox)
    sandbox.close()


# -- hardened XML ---------------------------------------------------------------------------------

def test_external_entity_is_refused_as_doctype():
    [error] = refusal(fixture("xxe.bpmn"))
    assert "DOCTYPE" in error["message"]
    assert error["line"] == 2
    assert "root:" not in error["message"]  # nothing of /etc/passwd leaked into the answer


def test_billion_laughs_is_refused_quickly():
    started = time.perf_counter()
    [error] = refusal(fixture("billion_laughs.bpmn"))
    assert "DOCTYPE" in error["message"]
    assert time.perf_counter() - started < 1.0


def test_external_dtd_is_refused_without_fetching_it():
    [error] = refusal(fixture("external_dtd.bpmn"))
    assert "DOCTYPE" in error["message"]


def test_malformed_xml_is_refused_with_its_line():
    [error] = refusal(fixture("malformed.bpmn"))
    assert error["line"] == 5
    assert error["message"].startswith("The file is not well-formed XML:")


def test_a_root_other_than_bpmn_definitions_is_refused():
    [error] = refusal("<html><body/></html>")
    assert "not a BPMN 2.0 'definitions' element" in error["message"]


def test_an_empty_file_is_refused():
    [error] = refusal(b"  \n")
    assert error["message"] == "The BPMN file is empty."


def test_text_with_an_encoding_declaration_is_accepted():
    text = fixture("script_xor.bpmn").decode("utf-8")
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    assert deploy.parse_definition(text).process_id == "script_xor"


def test_bytes_are_read_in_their_declared_encoding():
    xml = fixture("spiff_profile.bpmn").decode("utf-8")
    xml = xml.replace('encoding="UTF-8"', 'encoding="ISO-8859-1"').replace('name="Greet"', 'name="Café"')
    parsed = deploy.parse_definition(xml.encode("iso-8859-1"))
    assert parsed.spec.task_specs["greet"].bpmn_name == "Café"


# -- profile --------------------------------------------------------------------------------------

def test_camunda_properties_are_read_into_extensions():
    parsed = deploy.parse_definition(fixture("camunda_profile.bpmn"))
    assert parsed.start_events == [deploy.StartEventInfo("hook", "webhook", None, line=10)]
    assert parsed.spec.task_specs["hook"].extensions["properties"] == {"trigger": "webhook"}
    assert parsed.spec.task_specs["done"].extensions["properties"] == {"output_keys": "decision,reason"}


def test_spiffworkflow_properties_are_read_like_camunda_ones():
    parsed = deploy.parse_definition(fixture("spiff_profile.bpmn"))
    assert parsed.start_events == [deploy.StartEventInfo("chat_start", "webchat", "support-site", line=6)]
    assert parsed.spec.task_specs["chat_start"].extensions["properties"] == {
        "trigger": "webchat", "channel": "support-site"}


def test_form_fields_and_buttons_are_parsed():
    extensions = deploy.parse_definition(fixture("camunda_profile.bpmn")).spec.task_specs["review"].extensions
    assert extensions["buttons"] == ["approve", "reject"]
    assert extensions["form"] == [
        {"id": "reason", "label": "Reason", "type": "string", "required": True},
        {"id": "priority", "label": "Priority", "type": "enum", "required": False,
         "options": [{"id": "low", "name": "Low"}, {"id": "normal", "name": "Normal"},
                     {"id": "high", "name": "High"}],
         "default": "normal"},
        {"id": "amount", "label": "Amount", "type": "long", "required": False},
    ]


def test_script_bodies_are_dedented_for_python():
    script = deploy.parse_definition(fixture("script_xor.bpmn")).spec.task_specs["score"].script
    assert script.splitlines()[0] == "score = amount * 2"


def test_decoration_is_accepted_and_ignored():
    parsed = deploy.parse_definition(fixture("decorated.bpmn"))
    assert parsed.process_id == "decorated"
    work = parsed.spec.task_specs["work"]
    assert work.data_input_associations == [] and work.data_output_associations == []
    assert "c_start" not in parsed.spec.task_specs  # the other pool is documentation only


def test_the_parser_overrides_a_copy_of_spiffs_parser_classes():
    tag = "{http://www.omg.org/spec/BPMN/20100524/MODEL}scriptTask"
    assert BatonBpmnParser.OVERRIDE_PARSER_CLASSES is not SpiffBpmnParser.OVERRIDE_PARSER_CLASSES
    assert BatonBpmnParser.OVERRIDE_PARSER_CLASSES[tag] != SpiffBpmnParser.OVERRIDE_PARSER_CLASSES[tag]


# -- validation -----------------------------------------------------------------------------------

def test_elements_that_cannot_run_are_refused_with_id_and_line():
    errors = refusal(fixture("unsupported_elements.bpmn"))
    assert {(e["element_id"], e["line"], e["message"]) for e in errors} == {
        ("call_timeout", 23, "boundaryEvent timerEventDefinition has no timeDate, timeDuration or "
                             "timeCycle; give it exactly one."),
        ("sub", 26, "A subProcess needs an end event."),
        ("each", 31, "multiInstanceLoopCharacteristics needs a loopCardinality or a collection "
                     "(loopDataInputRef, Camunda: Collection) to repeat over."),
    }


def test_an_operator_left_out_of_the_allowlist_is_refused_as_not_supported_yet(monkeypatch):
    assert "call" not in by_element(refusal(fixture("unsupported_elements.bpmn")))
    monkeypatch.setattr(allowlist, "ENABLED_OPERATORS", frozenset())
    [error] = by_element(refusal(fixture("unsupported_elements.bpmn")))["call"]
    assert (error["line"], error["message"]) == (14, "serviceTask with operator = http is not supported yet.")


def test_an_enabled_operator_task_parses_and_serializes(monkeypatch):
    monkeypatch.setattr(allowlist, "ENABLED_OPERATORS", frozenset({"send_message"}))
    xml = fixture("spiff_profile.bpmn").decode().replace(
        '<bpmn:task id="greet" name="Greet" />',
        '<bpmn:serviceTask id="greet"><bpmn:extensionElements><spiffworkflow:properties>'
        '<spiffworkflow:property name="operator" value="send_message" />'
        '<spiffworkflow:property name="text" value="Hello {{ name }}" />'
        '</spiffworkflow:properties></bpmn:extensionElements></bpmn:serviceTask>')
    spec, _ = bpmn.load_spec(deploy.parse_definition(xml).spec_json)
    assert spec.task_specs["greet"].operation_name == "send_message"
    assert spec.task_specs["greet"].extensions["properties"]["text"] == "Hello {{ name }}"


def test_a_script_syntax_error_is_refused_with_the_element_id_and_file_line():
    [error] = refusal(fixture("script_syntax_error.bpmn"))
    assert error["element_id"] == "broken"
    assert error["line"] == 10  # the line of `if total > 0` in the file
    assert "SyntaxError" in error["message"]


def test_a_condition_calling_import_is_refused():
    [error] = refusal(fixture("condition_import.bpmn"))
    assert error["element_id"] == "f_evil"
    assert "__import__" in error["message"]


def test_a_process_without_start_event_is_refused():
    [error] = refusal(fixture("no_start_event.bpmn"))
    assert error == {"element_id": "no_start", "line": 4, "message": "The process has no start event."}


def test_an_unknown_trigger_and_a_channel_trigger_without_channel_are_refused():
    errors = by_element(refusal(fixture("unknown_trigger.bpmn")))
    assert "'sms' is unknown" in errors["by_sms"][0]["message"]
    assert "needs a 'channel' property" in errors["by_telegram"][0]["message"]


def test_all_problems_of_a_file_are_reported_together_in_file_order():
    errors = refusal(fixture("several_errors.bpmn"))
    assert [e["element_id"] for e in errors] == ["start", "calc", "f_a", "f_b", "end", "listen"]
    assert [e["line"] for e in errors] == sorted(e["line"] for e in errors)


def test_a_process_marked_not_executable_is_refused_with_the_fix():
    [error] = refusal(fixture("not_executable.bpmn"))
    assert error["element_id"] == "sketch"
    assert 'set isExecutable="true"' in error["message"]


def test_several_executable_processes_are_refused():
    [error] = refusal(fixture("two_executable_processes.bpmn"))
    assert "2 executable processes ('pool_a', 'pool_b')" in error["message"]


def test_output_keys_must_be_variable_names():
    xml = fixture("script_xor.bpmn").decode().replace('value="score, band"', 'value="score;band"')
    [error] = refusal(xml)
    assert error["element_id"] == "end_high"
    assert "output_keys" in error["message"]


def test_a_complaint_only_spiffworkflow_finds_is_translated():
    # Two processes with one id: our checks pass (one is executable), SpiffWorkflow refuses.
    xml = fixture("not_executable.bpmn").decode().replace(
        "</bpmn:definitions>",
        '<bpmn:process id="sketch" isExecutable="true"><bpmn:startEvent id="s2" /></bpmn:process>'
        "</bpmn:definitions>")
    [error] = refusal(xml)
    assert error["element_id"] == "sketch"
    assert "Duplicate process ID" in error["message"]


def test_an_unexpected_error_becomes_one_generic_entry_and_is_logged(monkeypatch, caplog):
    def explode(self, root, filename=None):
        raise RuntimeError("boom")

    monkeypatch.setattr(BatonBpmnParser, "add_bpmn_xml", explode)
    with caplog.at_level(logging.ERROR, logger="baton.bpmn"), pytest.raises(BpmnValidationError) as caught:
        deploy.parse_definition(fixture("script_xor.bpmn"))
    [error] = caught.value.errors
    assert error == {"element_id": None, "line": None, "message": INTERNAL_MESSAGE}
    assert "boom" not in error["message"]
    assert any(record.exc_info for record in caplog.records)


def test_unicode_names_are_kept():
    parsed = deploy.parse_definition(fixture("unicode_names.bpmn").decode("utf-8"))
    assert (parsed.process_id, parsed.name) == ("заявка", "Обработка заявки — café ☕")
    spec, _ = bpmn.load_spec(parsed.spec_json)
    assert spec.task_specs["конец"].extensions["properties"] == {"output_keys": "приветствие"}


# -- serialization --------------------------------------------------------------------------------

def test_a_restored_spec_runs_scripts_and_conditions(script_engine):
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(fixture("script_xor.bpmn")).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data["amount"] = 80
    workflow.do_engine_steps()
    assert workflow.is_completed() and workflow.success
    assert workflow.last_task.data == {"amount": 80, "score": 160, "band": "high"}


def test_instance_state_round_trips_without_the_spec(script_engine):
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(fixture("camunda_profile.bpmn")).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
    variables = {"amount": Decimal("12.50"), "when": datetime(2026, 11, 22, 10, 15),
                 "day": date(2026, 11, 22),
                 "payload": {"typename": "not-ours", "items": [1, 2]}}
    workflow.get_tasks(state=TaskState.READY)[0].data.update(variables)
    workflow.do_engine_steps()

    state = bpmn.workflow_to_json(workflow)
    assert "spec" not in json.loads(state) and "subprocess_specs" not in json.loads(state)
    restored = bpmn.workflow_from_json(state, spec, subprocess_specs, script_engine)

    assert restored.script_engine is script_engine
    [review] = restored.get_tasks(state=TaskState.READY)
    assert review.task_spec.bpmn_id == "review"
    assert {k: review.data[k] for k in variables} == variables
    review.data["decision"] = "approve"
    review.run()
    restored.do_engine_steps()
    assert [t.task_spec.bpmn_id for t in restored.get_tasks(state=TaskState.READY)] == ["pack"]


def test_restoring_an_instance_never_makes_spiffworkflows_default_script_engine(script_engine, monkeypatch):
    """SpiffWorkflow's default engine runs eval/exec with full builtins: a restored workflow is
    built around the sandboxed engine from the start, and refused without one."""
    import SpiffWorkflow.bpmn.workflow as spiff_workflow

    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(fixture("camunda_profile.bpmn")).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
    workflow.do_engine_steps()
    state = bpmn.workflow_to_json(workflow)

    def no_default_engine(*args, **kwargs):
        raise AssertionError("SpiffWorkflow's default PythonScriptEngine was made")

    monkeypatch.setattr(spiff_workflow, "PythonScriptEngine", no_default_engine)
    restored = bpmn.workflow_from_json(state, spec, subprocess_specs, script_engine)
    assert restored.script_engine is script_engine
    with pytest.raises(BatonError) as caught:
        bpmn.workflow_from_json(state, spec, subprocess_specs, None)
    assert "sandboxed script engine" in caught.value.message


def test_the_full_serializer_round_trips_a_workflow(script_engine):
    """The full serializer (spec included) keeps the spec's extensions and the data's decimals. The
    workflow is rebuilt around the specs it wrote, with the sandboxed engine: SpiffWorkflow's own
    ``deserialize_json`` would build its default engine (full builtins) for the restored workflow."""
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(fixture("camunda_profile.bpmn")).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data["amount"] = Decimal("1.5")
    workflow.do_engine_steps()
    serializer = bpmn.make_serializer()
    written = json.loads(serializer.serialize_json(workflow))
    restored_spec = serializer.from_dict(written["spec"])
    restored_subprocesses = {name: serializer.from_dict(sub) for name, sub in written["subprocess_specs"].items()}
    restored = bpmn.workflow_from_json(bpmn.workflow_to_json(workflow), restored_spec, restored_subprocesses,
                                       script_engine)
    assert restored.script_engine is script_engine
    [review] = restored.get_tasks(state=TaskState.READY)
    assert review.data["amount"] == Decimal("1.5")
    assert review.task_spec.extensions["buttons"] == ["approve", "reject"]


def test_state_written_by_another_serializer_version_is_refused(script_engine):
    spec, subprocess_specs = bpmn.load_spec(deploy.parse_definition(fixture("spiff_profile.bpmn")).spec_json)
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)
    state = json.loads(bpmn.workflow_to_json(workflow))
    state["serializer_version"] = "0.9"
    with pytest.raises(BatonError) as caught:
        bpmn.workflow_from_json(json.dumps(state), spec, subprocess_specs, script_engine)
    assert "version '0.9'" in caught.value.message


def test_spiffarena_pre_scripts_are_checked_like_script_tasks():
    xml = fixture("spiff_profile.bpmn").decode().replace(
        '<bpmn:task id="greet" name="Greet" />',
        '<bpmn:task id="greet"><bpmn:extensionElements>'
        "<spiffworkflow:preScript>import os</spiffworkflow:preScript>"
        "</bpmn:extensionElements></bpmn:task>")
    [error] = refusal(xml)
    assert error["element_id"] == "greet"
    assert error["message"].startswith("task preScript cannot run: imports are not allowed")


def test_a_property_without_a_name_is_refused():
    xml = fixture("script_xor.bpmn").decode().replace('name="output_keys" ', "")
    [error] = refusal(xml)
    assert error["element_id"] == "end_high"
    assert "without a name" in error["message"]
