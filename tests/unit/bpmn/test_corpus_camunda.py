"""The 54 Camunda 7 example models (tests/corpus/camunda, Apache 2.0): at least 47 deploy and start,
the rest are refused with reasons a Camunda user can act on (element, line, what to change).

"Deploy" is ``deploy.parse_definitions`` (each executable pool a definition; no database needed);
"start" runs each deployed process in memory with the sandboxed script engine, from its default
start event, until it waits (a user task, an external task, a message) or ends. The outcome of
every file is the table in docs/coverage.md; recompute it with
``python -m pytest tests/unit/bpmn/test_corpus_camunda.py -k table -s`` (through the API:
tests/integration/test_camunda_corpus.py).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from engine.errors import BpmnValidationError

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "camunda"
FILES = sorted(CORPUS.rglob("*.bpmn"))

# The files that stay refused, each with the phrase its first reason carries: code Baton does not run
# (Groovy, JavaScript, a listener's script, a connector's JavaScript output), never a gap of its own.
REFUSED = {
    "bpmn-model-api/parse-bpmn/src/test/resources/process.bpmn": "scriptFormat 'groovy' is not supported",
    "scripttask/xslt-scripttask/src/main/resources/xslt-example.bpmn": "camunda:executionListener (a groovy script)",
    "servicetask/rest-service/src/main/resources/invokeRestService.bpmn": "camunda:connector (http-connector)",
    "spin/dataformat-configuration-global/src/main/resources/testProcess.bpmn": "scriptFormat 'javascript'",
    "spin/dataformat-configuration-in-process-application/src/main/resources/testProcess.bpmn":
        "scriptFormat 'javascript'",
    "spring-boot-starter/external-task-client/loan-granting-spring-boot-webapp/src/main/resources/bpmn/"
    "loan-granting.bpmn": "camunda:inputOutput with a javascript script",
    # Its assignees come from a Java bean's methods, which Baton cannot call (issue 27 reads camunda:assignee).
    "testing/assert/job-announcement-publication-process/src/test/resources/camunda-testing-job-announcement.bpmn":
        "the method call findRequester(...)",
}
# What a process needs to start that a caller gives: variables, or the called definitions' files
# (by code, as the engine resolves a call activity's calledElement).
START_VARIABLES = {"order-item-process": {"orderItems": [{"id": 1}, {"id": 2}]}}
CALLED = {"subProcess": "multi-tenancy/tenant-identifier-shared-definitions/src/main/resources/processes/"
                        "default/subProcess.bpmn",
          "camunda-testing-job-announcement-publication": "testing/assert/job-announcement-publication-process/"
                                                          "src/test/resources/camunda-testing-job-announcement-"
                                                          "publication.bpmn"}


def name(path: Path) -> str:
    return path.relative_to(CORPUS).as_posix()


def test_the_camunda_corpus_is_there():
    assert len(FILES) == 54


@pytest.mark.parametrize("path", FILES, ids=name)
def test_a_camunda_file_deploys_or_is_refused_with_an_actionable_reason(path):
    expected = REFUSED.get(name(path))
    try:
        definitions = deploy.parse_definitions(path.read_bytes())
    except BpmnValidationError as refused:
        assert expected is not None, f"refused: {refused.errors}"
        assert expected in refused.errors[0]["message"]
        for error in refused.errors:
            assert error["element_id"] and error["line"], error  # located, so the user finds it
            assert "internal error" not in error["message"] and error["message"].endswith(".")
        return
    assert expected is None, "deploys, but the table says refused"
    assert definitions


def start(parsed: deploy.ParsedDefinition, engine) -> BpmnWorkflow:
    spec, subprocess_specs = bpmn.load_spec(parsed.spec_json)
    for code in parsed.called_elements:  # as the engine composes the called definition's spec
        called = deploy.parse_definitions((CORPUS / CALLED[code]).read_bytes())[0]
        called_spec, called_subprocesses = bpmn.load_spec(called.spec_json)
        subprocess_specs = {**subprocess_specs, code: called_spec, **called_subprocesses}
    workflow = BpmnWorkflow(spec, subprocess_specs, script_engine=engine)
    bpmn.start_at(workflow, parsed.default_start)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(START_VARIABLES.get(parsed.process_id, {}))
    workflow.do_engine_steps()
    return workflow


def outcome(path: Path, engine) -> str:
    """One cell of the coverage table."""
    try:
        definitions = deploy.parse_definitions(path.read_bytes())
    except BpmnValidationError as refused:
        first = refused.errors[0]
        more = f" (+{len(refused.errors) - 1} more)" if len(refused.errors) > 1 else ""
        return f"refused: `{first['element_id']}` line {first['line']}: {first['message']}{more}"
    parts = []
    for parsed in definitions:
        workflow = start(parsed, engine)
        waiting = sorted({t.task_spec.bpmn_id for t in workflow.get_tasks(
            state=TaskState.READY | TaskState.WAITING | TaskState.STARTED) if t.task_spec.bpmn_id})
        state = "completes" if workflow.is_completed() else "waits at " + ", ".join(f"`{w}`" for w in waiting)
        topics = f"; external topics {', '.join(f'`{t}`' for t in parsed.external_topics)}" \
            if parsed.external_topics else ""
        parts.append(f"deploys, starts, {state}{topics}")
    return "; ".join(parts)


def test_at_least_47_deploy_and_start_the_rest_are_the_refused_ones(script_engine):
    started = 0
    for path in FILES:
        if name(path) in REFUSED:
            continue
        for parsed in deploy.parse_definitions(path.read_bytes()):
            workflow = start(parsed, script_engine)
            assert workflow.is_completed() or workflow.get_tasks(
                state=TaskState.READY | TaskState.WAITING | TaskState.STARTED), name(path)
        started += 1
    assert started == len(FILES) - len(REFUSED) >= 47


def test_table(script_engine):
    """The outcome of every file, as docs/coverage.md lists it (printed with -s)."""
    rows = [f"| `{name(path)}` | {outcome(path, script_engine)} |" for path in FILES]
    print("\n| file | outcome |\n|---|---|\n" + "\n".join(rows))
    assert sum("deploys" in row for row in rows) == len(FILES) - len(REFUSED)
