"""baton.client's typed calls against the real server, on SQLite and PostgreSQL: answers as the API
gives them, every refusal one RpcError with the server's code, reason, message and data."""
from __future__ import annotations

import pytest

from baton.client import Client, RpcError
from tests.harness import bpmn, free_port


@pytest.fixture
def client(server, admin_key):
    with Client(server.base_url, admin_key) as client:
        yield client


def test_typed_calls_deploy_start_and_read_an_instance(client, unique_code):
    deployed = client.definition.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    started = client.process.start(unique_code, variables={"order": 7})

    status = client.process.status(started["instance_id"])

    assert started == {"instance_id": started["instance_id"], "status": "running",
                       "definition_id": deployed["definition_id"]}
    assert status["code"] == unique_code and status["variables"]["order"] == 7
    assert client.call("process.status", instance_id=started["instance_id"])["code"] == unique_code


def test_a_refusal_is_one_error_class_carrying_the_servers_code_reason_and_data(client, unique_code):
    with pytest.raises(RpcError) as missing:
        client.process.status(999_999_999)
    with pytest.raises(RpcError) as refused:
        client.definition.deploy(bpmn("several_errors.bpmn"), code=unique_code)
    with pytest.raises(RpcError) as unknown:
        client.call("process.status", instance_id=1, extra=True)

    assert (missing.value.code, missing.value.reason, missing.value.message) == \
        (-32602, "not_found", "Instance 999999999 not found.")
    assert refused.value.reason == "invalid_params" and refused.value.data["errors"][0]["line"]
    assert unknown.value.data == {"reason": "invalid_params", "params": ["extra"]}


def test_a_key_without_the_permission_is_forbidden_naming_it(server, client):
    reader = Client(server.base_url, client.apikey.create("reader", ["task.list"])["api_key"])

    with pytest.raises(RpcError) as forbidden:
        reader.process.list()

    assert forbidden.value.reason == "forbidden" and forbidden.value.data["permission"] == "process.list"
    assert reader.task.list(per_page=1)["per_page"] == 1


def test_a_server_that_is_not_there_is_an_rpc_error_saying_so():
    with pytest.raises(RpcError) as unreachable:
        Client(f"http://127.0.0.1:{free_port()}", "bt_x").process.list()

    assert unreachable.value.reason == "unreachable" and unreachable.value.code is None
    assert "Cannot reach Baton at http://127.0.0.1:" in unreachable.value.message


def test_a_nullable_param_is_sent_as_null_only_when_given(client, unique_code):
    client.definition.deploy(bpmn("webhook_order.bpmn"), code=unique_code)
    webhook = next(item for item in client.webhook.list(per_page=100)["items"] if item["code"] == unique_code)

    signed = client.webhook.update(webhook["webhook_id"], "s" * 20)
    unsigned = client.webhook.update(webhook["webhook_id"], None)

    assert signed["has_secret"] is True and unsigned["has_secret"] is False
