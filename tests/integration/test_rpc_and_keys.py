"""The JSON-RPC endpoint and API keys, over real HTTP: §3 and the §4.5 error table."""
from __future__ import annotations

import pytest

from tests.harness import RpcError, bpmn


def error_of(response):
    assert "Traceback" not in response.text
    return response.json()["error"]


@pytest.mark.parametrize("path", ["/v1/rpc", "/rpc"])
def test_error_table_over_http(server, admin_key, path):
    api = server.api(admin_key, path)
    cases = [
        (dict(data=b"{oops"), -32700, "parse_error"),
        (dict(body={"jsonrpc": "1.0", "method": "process.list", "id": 1}), -32600, "invalid_request"),
        (dict(body={"jsonrpc": "2.0", "method": "no.such", "id": 1}), -32601, "method_not_found"),
        (dict(body={"jsonrpc": "2.0", "method": "process.status", "params": {}, "id": 1}), -32602, "invalid_params"),
        (dict(body={"jsonrpc": "2.0", "method": "process.status", "params": {"instance_id": 10**9}, "id": 1}),
         -32602, "not_found"),
    ]
    for kwargs, code, reason in cases:
        response = api.post(**kwargs)
        assert response.status_code == 200
        error = error_of(response)
        assert (error["code"], error["data"]["reason"]) == (code, reason), kwargs


def test_missing_unknown_and_revoked_keys_are_401(server, api):
    for key in (None, "bt_nothing_here", "bt_aaaaaaaaaaaa_" + "b" * 32):
        response = server.api(key).post({"jsonrpc": "2.0", "method": "process.list", "id": 7})
        assert response.status_code == 401
        error = error_of(response)
        assert (error["code"], error["data"]["reason"]) == (-32603, "unauthorized")

    created = api.call("apikey.create", name="short-lived", permissions=["process.*"])
    assert api.call("apikey.revoke", key_id=created["key_id"]) == {"key_id": created["key_id"], "revoked": True}
    revoked = server.api(created["api_key"]).post({"jsonrpc": "2.0", "method": "process.list", "id": 1})
    assert revoked.status_code == 401


def test_key_permissions_with_wildcards_and_forbidden_names_the_permission(server, api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    limited = server.api(api.call("apikey.create", name="crm", permissions=["process.*"])["api_key"])
    starter = server.api(api.call("apikey.create", name="starter", permissions=["process.start"])["api_key"])

    instance_id = limited.call("process.start", definition_id=unique_code)["instance_id"]
    assert limited.call("process.status", instance_id=instance_id)["instance_id"] == instance_id
    starter.call("process.start", definition_id=unique_code)
    for client, method, params, permission in [
            (limited, "definition.list", {}, "admin"),
            (limited, "apikey.create", {"name": "x", "permissions": ["*"]}, "admin"),
            (starter, "process.status", {"instance_id": instance_id}, "process.status")]:
        with pytest.raises(RpcError) as caught:
            client.call(method, **params)
        assert (caught.value.code, caught.value.reason) == (-32603, "forbidden")
        assert caught.value.data["permission"] == permission


def test_api_keys_are_shown_once_and_listed_without_secret(api):
    created = api.call("apikey.create", name="listing", permissions=["process.start", "task.*"])
    assert created["api_key"].startswith("bt_")
    listed = api.call("apikey.list")["items"]
    mine = next(k for k in listed if k["key_id"] == created["key_id"])
    assert mine["permissions"] == ["process.start", "task.*"]
    assert created["api_key"] not in str(listed)


@pytest.mark.parametrize("permissions", [[], "process.*", ["process start"], [1], ["*", None]])
def test_bad_permissions_are_invalid_params(api, permissions):
    with pytest.raises(RpcError) as caught:
        api.call("apikey.create", name="bad", permissions=permissions)
    assert caught.value.reason == "invalid_params" and "permissions" in caught.value.message


def test_batch_items_are_answered_one_by_one(api):
    response = api.post([
        {"jsonrpc": "2.0", "method": "process.list", "params": {"per_page": 1}, "id": "a"},
        {"jsonrpc": "2.0", "method": "process.status", "params": {"instance_id": "x"}, "id": "b"},
        {"jsonrpc": "2.0", "method": "process.list"},
        {"method": "process.list", "id": "d"},
        5,
    ])
    assert response.status_code == 200
    answers = response.json()
    assert [a.get("id") for a in answers] == ["a", "b", "d", None]
    assert "result" in answers[0]
    assert answers[1]["error"]["data"]["reason"] == "invalid_params"
    assert answers[2]["error"]["code"] == -32600 and answers[3]["error"]["code"] == -32600


def test_all_notification_batch_is_204_and_empty_batch_is_one_error(api):
    notifications = api.post([{"jsonrpc": "2.0", "method": "process.list"}] * 2)
    assert notifications.status_code == 204 and notifications.content == b""
    empty = api.post([])
    assert empty.status_code == 200
    assert empty.json()["error"]["code"] == -32600 and empty.json()["id"] is None


def test_legacy_path_takes_process_id(server, admin_key, unique_code):
    api = server.api(admin_key)
    deployed = api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    legacy = server.api(admin_key, "/rpc")
    started = legacy.call("process.start", process_id=deployed["definition_id"])
    assert started["definition_id"] == deployed["definition_id"]


def test_unknown_path_is_404_json(server):
    import requests

    response = requests.get(server.base_url + "/nowhere", timeout=10)
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_health_and_readiness(server):
    import requests

    assert requests.get(server.base_url + "/healthz", timeout=10).json() == {"status": "ok"}
    assert requests.get(server.base_url + "/readyz", timeout=10).json() == {"status": "ready"}
    metrics = requests.get(server.base_url + "/metrics", timeout=10)
    assert "baton_jobs_pending" in metrics.text


def test_admin_method_groups_are_refused_as_permissions(api):
    with pytest.raises(RpcError) as caught:
        api.call("apikey.create", name="x", permissions=["definition.*"])
    assert caught.value.reason == "invalid_params" and "admin" in caught.value.message


def test_apikey_list_is_a_page(api):
    for n in range(3):
        api.call("apikey.create", name=f"paged-{n}", permissions=["process.status"])
    page = api.call("apikey.list", per_page=2)
    assert page["per_page"] == 2 and len(page["items"]) == 2 and page["total"] >= 4
