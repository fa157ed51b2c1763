"""Hostile input at every door (engine.json_values): overflowing numbers, NaN, nesting past the limit
and lone surrogates are refused with an error naming where they are; values a process makes that
could not be read back fail that instance, named; rows already written with such values still read.
Real server, SQLite and PostgreSQL."""
from __future__ import annotations

import json

import pytest
import requests
from sqlalchemy import create_engine, text

from tests.harness import bpmn
from tests.integration.test_tasks import open_task

DEEP = '{"a": ' + "[" * 65 + "]" * 65 + "}"
VERY_DEEP = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
SCRIPTED = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="s"><bpmn:outgoing>f1</bpmn:outgoing></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="make" />
    <bpmn:scriptTask id="make" scriptFormat="python"><bpmn:incoming>f1</bpmn:incoming><bpmn:outgoing>f2</bpmn:outgoing>
      <bpmn:script>SCRIPT</bpmn:script></bpmn:scriptTask>
    <bpmn:sequenceFlow id="f2" sourceRef="make" targetRef="review" />
    <bpmn:userTask id="review"><bpmn:incoming>f2</bpmn:incoming><bpmn:outgoing>f3</bpmn:outgoing></bpmn:userTask>
    <bpmn:sequenceFlow id="f3" sourceRef="review" targetRef="e" />
    <bpmn:endEvent id="e"><bpmn:incoming>f3</bpmn:incoming></bpmn:endEvent>
  </bpmn:process>
</bpmn:definitions>
"""

HOSTILE_BODIES = [
    ('{"v": 1e400}', "body.v", "number too large"),
    ('{"v": {"w": [-1e400]}}', "body.v.w[0]", "number too large"),
    ('{"v": NaN}', "body.v", "NaN is not a JSON number"),
    ('{"v": 9223372036854775808}', "body.v", "integer out of range"),
    ('{"v": {"x": "a\\ud800"}}', "body.v.x", "lone surrogate"),
    ('{"\\ud800": 1}', "body.\\ud800", "not valid Unicode"),
    (DEEP, "body.a", "nested deeper than 64 levels"),
    (VERY_DEEP, "body", "nested deeper than 64 levels"),
]


@pytest.fixture
def approval(api, unique_code):
    deployed = api.deploy(bpmn("camunda_profile.bpmn"), code=unique_code)
    return deployed["webhooks"][0]["url"]


def raw_rpc(api, body: str):
    response = api.post(data=body.encode("utf-8", "surrogatepass"))
    assert response.status_code in (200, 400), response.text
    return response.json()


@pytest.mark.parametrize("body, where, words", HOSTILE_BODIES)
def test_a_webhook_body_outside_the_limits_is_400_naming_where_and_starts_nothing(
        api, approval, body, where, words):
    before = api.call("process.list", per_page=1)["total"]
    response = requests.post(approval, data=body.encode(), headers={"Content-Type": "application/json"},
                             timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "bad_request"
    assert where in error["message"] and words in error["message"]
    assert api.call("process.list", per_page=1)["total"] == before


@pytest.mark.parametrize("body, where, words", HOSTILE_BODIES)
def test_rpc_params_outside_the_limits_are_invalid_params_naming_where(api, unique_code, body, where, words):
    deployed = api.deploy(bpmn("camunda_profile.bpmn"), code=unique_code)
    answer = raw_rpc(api, '{"jsonrpc": "2.0", "method": "process.start", "id": 7, "params": '
                          f'{{"definition_id": "{unique_code}", "variables": {body}}}}}')
    if body is VERY_DEEP:  # past what the parser itself takes: the body as a whole
        assert answer["error"]["code"] == -32600 and answer["id"] is None
        assert "nested deeper than 64 levels" in answer["error"]["message"]
        return
    assert answer["id"] == 7
    assert answer["error"]["code"] == -32602 and answer["error"]["data"]["reason"] == "invalid_params"
    shown = where.replace("body", "params.variables", 1)
    assert answer["error"]["data"]["where"].startswith(shown)  # nesting: found where it passes the limit
    assert answer["error"]["data"]["param"] == "variables"
    assert shown in answer["error"]["message"] and words in answer["error"]["message"]
    assert api.call("process.list", definition_id=deployed["definition_id"])["total"] == 0


def test_a_batch_answers_each_request_and_refuses_only_the_bad_one(api):
    answer = raw_rpc(api, '[{"jsonrpc": "2.0", "method": "task.list", "id": 1},'
                          ' {"jsonrpc": "2.0", "method": "task.list", "id": 2, "params": {"page": 1e400}},'
                          ' {"jsonrpc": "2.0", "method": "task.list", "id": "\\ud800"},'
                          ' {"jsonrpc": "2.0", "method": "task.list", "id": 4, "trace": NaN}]')
    by_id = {item["id"]: item for item in answer}
    assert "result" in by_id[1]
    assert by_id[2]["error"]["code"] == -32602 and by_id[2]["error"]["data"]["where"] == "params.page"
    assert by_id[None]["error"]["code"] == -32600  # the id itself cannot be echoed
    assert by_id[4]["error"]["code"] == -32600 and by_id[4]["error"]["data"]["where"] == "request.trace"


def test_a_batch_past_the_limit_is_refused_whole(api):
    batch = [{"jsonrpc": "2.0", "method": "task.list", "id": i} for i in range(101)]
    answer = api.post(batch).json()
    assert answer["error"]["code"] == -32600 and answer["id"] is None
    assert "at most 100 requests" in answer["error"]["message"]
    assert len(api.post(batch[:100]).json()) == 100


def test_a_value_a_script_makes_that_cannot_be_read_back_fails_its_instance_naming_where(api, unique_code):
    script = "d = 1\nfor i in range(70):\n    d = [d]\nbig = 10 ** 30"
    api.deploy(SCRIPTED.replace("SCRIPT", script), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code)["instance_id"]
    status = api.wait_for(instance_id)
    assert status["status"] == "failed"
    message = status["error"]["message"]
    assert "cannot be stored" in message and ("variables.big" in message or "variables.d[0]" in message)
    assert status["error"]["element_id"] == "make"
    # The failed instance still reads, and the tenant's lists still answer.
    assert api.call("process.status", instance_id=instance_id)["status"] == "failed"
    assert api.call("task.list", per_page=100)["items"] is not None


def test_rows_already_written_with_unreadable_values_still_read(api, approval, backend, database_url):
    """An instance and its task whose stored variables hold Infinity (SQLite kept it) or absurd
    nesting: process.status and task.list answer, that value shown as a marker."""
    instance_id = requests.post(approval, json={"ok": 1}, timeout=30).json()["instance_id"]
    task = open_task(api, instance_id)
    deep = "[" * 3000 + "]" * 3000
    bad = '{"ok": 1, "deep": ' + deep + (', "inf": Infinity}' if backend == "sqlite" else "}")
    engine = create_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE instances SET variables = :v WHERE id = :id"), {"v": bad, "id": instance_id})
            conn.execute(text("UPDATE tasks SET variables = :v WHERE id = :id"), {"v": bad, "id": task["task_id"]})
            state = json.loads(conn.execute(text("SELECT state FROM instances WHERE id = :id"),
                                            {"id": instance_id}).scalar_one())
            state["data"] = {"deep": "PLACEHOLDER"}
            conn.execute(text("UPDATE instances SET state = :s WHERE id = :id"),
                         {"s": json.dumps(state).replace('"PLACEHOLDER"', deep), "id": instance_id})
    finally:
        engine.dispose()
    path = api.call("process.path", instance_id=instance_id)  # reads the stored workflow state
    assert path["instance_id"] == instance_id
    status = api.call("process.status", instance_id=instance_id)
    assert status["variables"]["ok"] == 1
    assert "[unreadable value: nested deeper than 64 levels]" in json.dumps(status["variables"])
    listed = api.call("task.list", per_page=100)["items"]
    [row] = [item for item in listed if item["task_id"] == task["task_id"]]
    assert row["variables"]["ok"] == 1
    if backend == "sqlite":
        assert status["variables"]["inf"] == "[unreadable value: Infinity is not a JSON number]"
        assert row["variables"]["inf"] == "[unreadable value: Infinity is not a JSON number]"
    assert api.call("process.list", per_page=100)["items"]


@pytest.mark.parametrize("answer, where", [(b'{"v": 1e400}', "answer.v"), (b'{"v": [NaN]}', "answer.v[0]"),
                                           (b'{"v": ' + b"[" * 3000 + b"]" * 3000 + b"}", "answer")])
def test_an_http_task_answer_that_cannot_be_stored_fails_the_instance_naming_where(api, unique_code, answer, where):
    from tests.receiver import Answer, Receiver
    receiver = Receiver(Answer(200, answer, headers={"Content-Type": "application/json"})).start()
    try:
        api.deploy(bpmn("http_call.bpmn"), code=unique_code)
        instance_id = api.call("process.start", definition_id=unique_code, variables={
            "base": receiver.url, "order_id": 1, "note": "n", "token": "t"})["instance_id"]
        status = api.wait_for(instance_id)
    finally:
        receiver.stop()
    assert status["status"] == "failed"
    assert status["error"]["element_id"] == "call_crm"
    assert "cannot be stored" in status["error"]["message"] and where in status["error"]["message"]
    assert api.call("task.list", per_page=100)["items"] is not None
