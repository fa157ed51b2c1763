"""The audit log of administration (issue 29, INTERFACE §5.10) through the real server, SQLite and
PostgreSQL: every admin call that changed something is recorded with actor, time, method and the
id it touched, never a secret; ``audit.list`` pages and filters it, per tenant, for admins only."""
from __future__ import annotations

import json
import uuid

import pytest

from tests.harness import RpcError, bpmn


def audit_list(api, **params):
    return api.call("audit.list", **params)


def entries(api, **params) -> list[dict]:
    return audit_list(api, per_page=100, **params)["items"]


def test_admin_calls_are_recorded_with_actor_method_and_target_and_never_a_secret(api, server, unique_code):
    me = api.call("auth.whoami")
    deployed = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)
    webhook = deployed["webhooks"][0]
    hook_secret = "hook-secret-" + uuid.uuid4().hex
    api.call("webhook.update", webhook_id=webhook["webhook_id"], secret=hook_secret)
    rotated = api.call("webhook.rotate", webhook_id=webhook["webhook_id"])
    created = api.call("apikey.create", name=f"ops-{uuid.uuid4().hex[:6]}", permissions=["process.*"])
    chat_secret = "chat-secret-" + uuid.uuid4().hex
    channel = api.call("channel.create", type="webchat", name=f"au-{uuid.uuid4().hex[:8]}",
                       webhook_url="http://127.0.0.1:9/chat", webhook_secret=chat_secret)
    api.call("channel.update", config_id=channel["config_id"], webhook_secret=chat_secret + "-2")
    api.call("channel.delete", config_id=channel["config_id"])
    api.call("apikey.revoke", key_id=created["key_id"])
    api.call("definition.list")  # reads are not recorded

    mine = [e for e in entries(api, key_id=me["key_id"])][:8]
    assert [e["method"] for e in mine] == ["apikey.revoke", "channel.delete", "channel.update", "channel.create",
                                           "apikey.create", "webhook.rotate", "webhook.update", "definition.deploy"]
    assert [e["target"] for e in mine] == [
        {"kind": "api_key", "id": str(created["key_id"])}, {"kind": "channel", "id": str(channel["config_id"])},
        {"kind": "channel", "id": str(channel["config_id"])}, {"kind": "channel", "id": str(channel["config_id"])},
        {"kind": "api_key", "id": str(created["key_id"])}, {"kind": "webhook", "id": f"{unique_code}/paid"},
        {"kind": "webhook", "id": f"{unique_code}/paid"},
        {"kind": "definition", "id": str(deployed["definition_id"])}]
    for entry in mine:
        assert entry["actor"] == {"type": "api_key", "name": me["name"], "key_id": me["key_id"]}
        assert entry["at"].endswith("Z") and isinstance(entry["audit_id"], int)
    # Newest first, and ids increase with time.
    assert [e["audit_id"] for e in mine] == sorted((e["audit_id"] for e in mine), reverse=True)
    text = json.dumps(entries(api))
    for secret in (hook_secret, chat_secret, created["api_key"], webhook["webhook_id"], rotated["webhook_id"]):
        assert secret not in text


def test_a_failed_call_records_nothing_and_the_filters_work(api, other_api):
    before = api.call("audit.list")["total"]
    with pytest.raises(RpcError):
        api.call("apikey.revoke", key_id=10**9)
    with pytest.raises(RpcError):
        api.call("channel.create", type="webchat", name="", webhook_url="http://127.0.0.1:9/x")
    assert api.call("audit.list")["total"] == before
    api.call("apikey.create", name=f"f-{uuid.uuid4().hex[:6]}", permissions=["task.list"])
    assert api.call("audit.list")["total"] == before + 1
    only = entries(api, method="apikey.create")
    assert only and {e["method"] for e in only} == {"apikey.create"}
    assert entries(api, method="no.such.method") == []
    assert entries(api, key_id=10**9) == []
    page = api.call("audit.list", per_page=1, page=2)
    assert page["per_page"] == 1 and page["page"] == 2 and len(page["items"]) == 1
    # Another tenant sees none of this tenant's entries.
    mine = {e["audit_id"] for e in entries(api) if e["actor"]["type"] == "api_key"}
    theirs = {e["audit_id"] for e in entries(other_api)}
    assert not mine & theirs


def test_audit_list_is_for_admins_and_checks_its_params(api):
    reader = api.call("apikey.create", name=f"r-{uuid.uuid4().hex[:6]}", permissions=["process.*"])["api_key"]
    from tests.harness import Api

    with pytest.raises(RpcError) as refused:
        Api(api.base_url, reader).call("audit.list")
    assert refused.value.reason == "forbidden"
    for params, param in (({"per_page": 0}, "per_page"), ({"key_id": "x"}, "key_id"), ({"method": 5}, "method"),
                          ({"page": -1}, "page")):
        with pytest.raises(RpcError) as bad:
            audit_list(api, **params)
        assert bad.value.reason == "invalid_params" and bad.value.data.get("param") == param
