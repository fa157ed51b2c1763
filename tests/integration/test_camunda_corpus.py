"""The 54 Camunda 7 examples (tests/corpus/camunda) through the real server, on SQLite and
PostgreSQL: every file is deployed with definition.deploy; at least 47 deploy AND start (each
definition started with process.start runs to a wait or to its end, none fails), the rest are
refused with the reasons tests/unit/bpmn/test_corpus_camunda.py pins. The outcome of each file is
the table of docs/coverage.md (printed with ``-s``)."""
from __future__ import annotations

import uuid

import pytest

from tests.harness import RpcError
from tests.unit.bpmn.test_corpus_camunda import CALLED, CORPUS, FILES, REFUSED, START_VARIABLES, name


@pytest.fixture(scope="module")
def corpus_api(server):
    """A tenant of its own: the corpus's codes and timer starts stay out of the other tests' way."""
    return server.api(server.create_tenant(f"camunda-{uuid.uuid4().hex[:8]}"))


def outcome(api, path) -> tuple[bool, str]:
    """(deployed and started, the table's cell) of one file."""
    try:
        deployed = api.deploy(path.read_text(encoding="utf-8"))
    except RpcError as refused:
        assert refused.reason == "invalid_params", refused
        first = refused.data["errors"][0]
        return False, f"refused: `{first['element_id']}` line {first['line']}: {first['message']}"
    cells = []
    for definition in deployed["definitions"]:
        process_id = definition["code"]
        instance_id = api.call("process.start", definition_id=definition["definition_id"],
                               variables=START_VARIABLES.get(process_id, {}))["instance_id"]
        api.wait_until_idle()
        status = api.call("process.status", instance_id=instance_id)
        assert status["status"] in ("running", "completed"), (name(path), status)
        if status["status"] == "completed":
            cells.append("deploys, starts, completes")
            continue
        waits = ", ".join(f"`{e['element_id']}` ({_what(e)})" for e in status["waiting_for"])
        cells.append(f"deploys, starts, waits at {waits}")
    return True, "; ".join(cells)


def _what(entry: dict) -> str:
    if "topic" in entry:
        return f"external, topic `{entry['topic']}`"
    if "message" in entry:
        return f"message `{entry['message']}`"
    return entry["kind"]


def test_at_least_47_camunda_examples_deploy_and_start_and_the_rest_are_refused_as_pinned(corpus_api):
    for code, called in CALLED.items():  # what their callers name, deployed first
        corpus_api.deploy((CORPUS / called).read_text(encoding="utf-8"), code=code)
    rows, started = [], 0
    for path in FILES:
        ok, cell = outcome(corpus_api, path)
        expected = REFUSED.get(name(path))
        if expected is None:
            assert ok, (name(path), cell)
        else:
            assert not ok and expected in cell, (name(path), cell)
        started += ok
        rows.append(f"| `{name(path)}` | {cell} |")
    print("\n| file | outcome through the API |\n|---|---|\n" + "\n".join(rows))
    assert started == len(FILES) - len(REFUSED) >= 47
