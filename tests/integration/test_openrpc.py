"""The OpenRPC document through the real server, on SQLite and PostgreSQL: ``GET /v1/openrpc.json``
and ``rpc.discover`` serve the same valid document; the server accepts every param it documents;
and every method's answer, in a run that calls each of them, matches the result schema it publishes."""
from __future__ import annotations

import uuid

import jsonschema
import pytest
import requests

from tests.harness import RpcError, bpmn
from tests.unit.rpc.test_openrpc import example, meta_schema_validator

MODEL = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
                  xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d">
  <bpmn:message id="m_go" name="go" />
  <bpmn:process id="CODE" isExecutable="true">
    <bpmn:startEvent id="start"><bpmn:extensionElements><camunda:properties>
      <camunda:property name="trigger" value="webhook" /></camunda:properties></bpmn:extensionElements>
    </bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="review" />
    <bpmn:userTask id="review" name="Review" />
    <bpmn:sequenceFlow id="f2" sourceRef="review" targetRef="invoice" />
    <bpmn:serviceTask id="invoice" camunda:type="external" camunda:topic="TOPIC" />
    <bpmn:sequenceFlow id="f3" sourceRef="invoice" targetRef="wait" />
    <bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="m_go" /></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f4" sourceRef="wait" targetRef="end" />
    <bpmn:endEvent id="end" />
  </bpmn:process>
</bpmn:definitions>"""

# A user task with an error and a (non-interrupting) escalation boundary event: task.bpmn_* reach them.
THROWS = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d">
  <bpmn:error id="E" errorCode="e" /><bpmn:escalation id="X" escalationCode="x" />
  <bpmn:process id="throws" isExecutable="true">
    <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="review" />
    <bpmn:userTask id="review" /><bpmn:sequenceFlow id="f2" sourceRef="review" targetRef="e1" />
    <bpmn:endEvent id="e1" />
    <bpmn:boundaryEvent id="failed" attachedToRef="review"><bpmn:errorEventDefinition errorRef="E" />
    </bpmn:boundaryEvent><bpmn:sequenceFlow id="f3" sourceRef="failed" targetRef="e2" /><bpmn:endEvent id="e2" />
    <bpmn:boundaryEvent id="raised" attachedToRef="review" cancelActivity="false">
      <bpmn:escalationEventDefinition escalationRef="X" /></bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f4" sourceRef="raised" targetRef="e3" /><bpmn:endEvent id="e3" />
  </bpmn:process>
</bpmn:definitions>"""


@pytest.fixture
def fresh(server):
    """A tenant of its own, where no id of another test's objects exists."""
    return server.api(server.create_tenant(f"openrpc-{uuid.uuid4().hex[:8]}"))


def served(server) -> dict:
    response = requests.get(server.base_url + "/v1/openrpc.json", timeout=10)
    assert response.status_code == 200 and response.headers["Access-Control-Allow-Origin"] == "*"
    return response.json()


def test_the_document_is_served_to_anyone_and_rpc_discover_answers_the_same(server, fresh):
    document = served(server)

    assert document == fresh.call("rpc.discover")
    assert not list(meta_schema_validator().iter_errors(document))
    assert document["servers"] == [{"name": "Baton", "url": server.base_url + "/v1/rpc"}]


def test_rpc_discover_needs_only_a_valid_key(server, fresh):
    reader = server.api(fresh.call("apikey.create", name="reader", permissions=["task.list"])["api_key"])

    assert reader.call("rpc.discover")["methods"]
    with pytest.raises(RpcError) as refused:
        server.api("bt_000000000000_nope").call("rpc.discover")
    assert refused.value.reason == "unauthorized"


def test_the_server_accepts_every_param_it_documents(server, fresh):
    """Each method called with every documented param (a value its schema allows) in an empty tenant:
    whatever it answers (not found, a conflict, a refused BPMN), never an unknown or mistyped param."""
    for method in served(server)["methods"]:
        params = {param["name"]: example(param["schema"]) for param in method["params"]}
        try:
            fresh.call(method["name"], **params)
        except RpcError as refused:
            # Not found, a conflict, a refused BPMN or key entry: never an unknown ("params") or a
            # mistyped ("param") param, nor a failure.
            assert refused.reason != "internal", (method["name"], refused)
            assert "params" not in refused.data and "param" not in refused.data, (method["name"], refused)


class Checked:
    """Calls through ``api``, each answer validated against its method's published result schema."""

    def __init__(self, api, document: dict):
        self.api = api
        self.schemas = {method["name"]: method["result"]["schema"] for method in document["methods"]}
        self.validated: set[str] = set()

    def __call__(self, method: str, /, **params):
        answer = self.api.call(method, **params)
        if method == "rpc.discover":  # its schema is OpenRPC's meta-schema, by URL
            errors = list(meta_schema_validator().iter_errors(answer))
        else:
            errors = list(jsonschema.Draft7Validator(self.schemas[method]).iter_errors(answer))
        assert not errors, (method, errors[0].message, list(errors[0].absolute_path))
        self.validated.add(method)
        return answer


def test_every_answer_matches_its_published_result_schema(server, fresh, unique_code):
    call = Checked(fresh, served(server))
    topic = f"topic-{unique_code}"
    deployed = call("definition.deploy", bpmn=MODEL.replace("CODE", unique_code).replace("TOPIC", topic))
    definition_id = deployed["definition_id"]
    call("definition.list", code=unique_code)
    call("definition.get", definition_id=definition_id)
    instance_id = call("process.start", definition_id=unique_code, variables={"order": 7})["instance_id"]
    fresh.wait_until_idle()
    call("process.status", instance_id=instance_id)
    call("process.list", definition_id=definition_id)
    call("process.path", instance_id=instance_id)
    call("definition.stats", definition_id=definition_id)
    call("definition.instances_at", definition_id=definition_id, element_id="review", state="waiting")
    task = call("task.list", instance_id=instance_id)["items"][0]
    operator = Checked(server.api(fresh.call("apikey.create", name="ann", user="ann",
                                             permissions=["task.*", "conversation.*"])["api_key"]), served(server))
    operator("task.claim", task_id=task["task_id"])
    operator("task.unclaim", task_id=task["task_id"])
    call("task.assign", task_id=task["task_id"], user="ann")
    call("task.assign", task_id=task["task_id"], user=None)
    call("task.complete", task_id=task["task_id"], result={"ok": True})
    fresh.wait_until_idle()
    fetched = call("external.fetch_and_lock", worker_id="w", topics=[{"name": topic, "lock_duration_ms": 60_000}])
    external_id = fetched["tasks"][0]["task_id"]
    call("external.extend_lock", task_id=external_id, worker_id="w", lock_duration_ms=60_000)
    call("external.failure", task_id=external_id, worker_id="w", message="try again", retries=1)
    call("external.list", instance_id=instance_id)
    external_id = call("external.fetch_and_lock", worker_id="w",
                       topics=[{"name": topic, "lock_duration_ms": 60_000}])["tasks"][0]["task_id"]
    call("external.complete", task_id=external_id, worker_id="w", variables={"invoice": "A-1"})
    fresh.wait_until_idle()
    call("process.message", instance_id=instance_id, message="go")
    fresh.wait_until_idle()

    second = call("process.start", definition_id=definition_id)["instance_id"]
    fresh.wait_until_idle()
    second_task = fresh.call("task.list", instance_id=second)["items"][0]["task_id"]
    fresh.call("task.complete", task_id=second_task)
    fresh.wait_until_idle()
    bpmn_error_id = call("external.fetch_and_lock", worker_id="w",
                         topics=[{"name": topic, "lock_duration_ms": 60_000}])["tasks"][0]["task_id"]
    call("external.bpmn_error", task_id=bpmn_error_id, worker_id="w", error_code="NOPE")
    fresh.wait_for(second, ("failed",))
    call("process.retry", instance_id=second)
    call("process.cancel", instance_id=second)
    with pytest.raises(RpcError):
        call("message.correlate", name="nobody waits")
    fresh.call("definition.deploy", bpmn=MODEL.replace("CODE", unique_code + "-b").replace("TOPIC", topic))
    third = fresh.call("process.start", definition_id=unique_code + "-b")["instance_id"]
    fresh.wait_until_idle()
    fresh.call("task.complete", task_id=fresh.call("task.list", instance_id=third)["items"][0]["task_id"])
    fresh.wait_until_idle()
    fresh.call("external.complete", worker_id="w", task_id=fresh.call(
        "external.fetch_and_lock", worker_id="w", topics=[{"name": topic, "lock_duration_ms": 60_000}])["tasks"][0]["task_id"])
    fresh.wait_until_idle()
    call("message.correlate", name="go")
    call("signal.broadcast", name="nobody listens")

    key = call("apikey.create", name="worker", permissions=["external.*"])
    call("apikey.list")
    call("apikey.revoke", key_id=key["key_id"])
    webhook = call("webhook.list")["items"][0]
    rotated = call("webhook.rotate", webhook_id=webhook["webhook_id"])
    call("webhook.update", webhook_id=rotated["webhook_id"], secret="s" * 16)

    # Nobody listens at its URL: its deliveries stay queued, to be retried.
    channel = call("channel.create", type="webchat", name=f"site-{unique_code}", webhook_url="http://127.0.0.1:9/chat")
    call("channel.get", config_id=channel["config_id"])
    call("channel.list")
    call("channel.update", config_id=channel["config_id"], name=f"site2-{unique_code}")
    chat_code = unique_code + "-chat"
    fresh.call("definition.deploy", code=chat_code,
               bpmn=bpmn("chat_reply.bpmn").replace("__CHANNEL__", str(channel["config_id"])))
    chat_key = fresh.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    inbound = requests.post(f"{server.base_url}/channels/webchat/{channel['config_id']}/inbound",
                            json={"chat_id": "c-1", "text": "hello"}, headers={"X-API-Key": chat_key}, timeout=10)
    assert inbound.status_code == 202, inbound.text
    binding_id = inbound.json()["binding_id"]
    fresh.wait_until_idle()
    call("conversation.list")
    operator("conversation.claim", binding_id=binding_id)
    call("conversation.assign", binding_id=binding_id, user=None)
    call("conversation.send", binding_id=binding_id, text="an operator here")
    call("conversation.messages", binding_id=binding_id)
    delivery = call("delivery.list")["items"][0]
    call("delivery.retry", delivery_id=delivery["delivery_id"])
    fresh.call("process.cancel", instance_id=fresh.call("conversation.list")["items"][0]["instance_id"])
    call("channel.delete", config_id=channel["config_id"])
    call("auth.whoami")
    call("rpc.discover")
    fresh.call("definition.deploy", bpmn=THROWS, code=unique_code + "-throws")
    thrower = fresh.call("process.start", definition_id=unique_code + "-throws")["instance_id"]
    fresh.wait_until_idle()
    task_id = fresh.call("task.list", instance_id=thrower)["items"][0]["task_id"]
    call("process.set_variables", instance_id=thrower, variables={"note": "checked"}, remove=["nothing"])
    call("process.skip", instance_id=thrower, element_id="review", dry_run=True)
    call("process.rewind", instance_id=thrower, element_id="s", dry_run=True)
    call("process.history", instance_id=thrower)
    call("task.bpmn_escalation", task_id=task_id, escalation_code="x")
    call("task.bpmn_error", task_id=task_id, error_code="e", message="cannot be paid")
    me = call("auth.whoami")
    assert call("audit.list", method="channel.delete", key_id=me["key_id"])["items"][0]["method"] == "channel.delete"

    repaired = fresh.call("process.start", definition_id=unique_code)["instance_id"]
    fresh.wait_until_idle()
    call("process.set_variables", instance_id=repaired, variables={"note": "checked"})
    call("process.skip", instance_id=repaired, element_id="review")
    fresh.wait_until_idle()
    call("process.rewind", instance_id=repaired, element_id="review")
    fresh.wait_until_idle()
    call("process.history", instance_id=repaired)
    second_version = fresh.call("definition.deploy", bpmn=MODEL.replace("CODE", unique_code).replace("TOPIC", topic)
                                .replace('name="Review"', 'name="Review again"'))["definition_id"]
    call("definition.diff", from_definition_id=definition_id, to_definition_id=second_version)
    call("process.migrate", instance_ids=[repaired], to_definition_id=second_version, dry_run=True)

    assert call.validated | operator.validated == set(call.schemas)
