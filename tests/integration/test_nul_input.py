"""A NUL character anywhere a caller can put one (path, query, header, body, params, ids) is a
JSON 4xx naming nothing internal, never a 500: PostgreSQL refuses NUL in text, SQLite keeps it."""
from __future__ import annotations

import json

import pytest
import requests

NUL_REQUESTS = [
    ("POST", "/webhooks/inbound/%00", {}, b"{}"),
    ("POST", "/webhooks/inbound/abc%00def", {}, b'{"a": 1}'),
    ("POST", "/webhooks/inbound/%00", {"Content-Type": "application/x-www-form-urlencoded"}, b"a=%00"),
    ("POST", "/webhooks/inbound/%00", {"Transfer-Encoding": "chunked"}, None),
    ("POST", "/channels/viber/inbound?channel=%00", {"X-Viber-Content-Signature": "00"}, b'{"event": "message"}'),
    ("POST", "/webhooks/whatsapp", {"X-Hub-Signature-256": "sha256=00"},
     json.dumps({"object": "whatsapp_business_account", "entry": [{"changes": [{"value": {
         "metadata": {"phone_number_id": "\u0000"}, "messages": [{"id": "m\u0000", "from": "1", "type": "text",
                                                                 "text": {"body": "x"}}]}}]}]}).encode()),
    ("GET", "/webhooks/whatsapp?hub.mode=subscribe&hub.verify_token=%00&hub.challenge=%00", {}, None),
    ("POST", "/webhooks/telegram", {"X-Telegram-Bot-Api-Secret-Token": "abc"}, b'{"update_id": 1}'),
    ("POST", "/tasks/1/callback", {"Content-Type": "application/json"}, b'{"result": {"\\u0000": "\\u0000"}}'),
    ("GET", "/%00", {}, None),
]


@pytest.mark.parametrize("method, path, headers, body", NUL_REQUESTS)
def test_a_nul_anywhere_is_a_json_client_error(server, method, path, headers, body):
    if headers.get("Transfer-Encoding") == "chunked":
        body = iter([b"{}"])
        headers = {"Content-Type": "application/json"}
    response = requests.request(method, server.base_url + path, headers=headers, data=body, timeout=30)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert set(response.json()) == {"error"}


@pytest.mark.parametrize("params", [
    {"method": "process.start", "params": {"definition_id": "a\u0000b"}},
    {"method": "process.list", "params": {"status": "run\u0000ning"}},
    {"method": "task.list", "params": {"definition_id": "\u0000"}},
    {"method": "webhook.rotate", "params": {"webhook_id": "\u0000"}},
    {"method": "message.send", "params": {"message": "m\u0000", "correlation": {"k": "\u0000"}}},
    {"method": "process.start", "params": {"definition_id": 1, "variables": {"\u0000": "\u0000"}}},
    {"method": "conversation.send", "params": {"binding_id": 1, "text": "\u0000"}},
    {"method": "external_task.fetch_and_lock", "params": {"worker_id": "\u0000", "topics": [{"name": "\u0000"}]}},
])
def test_a_nul_in_rpc_params_is_never_internal(api, params):
    answer = api.post({"jsonrpc": "2.0", "id": 1, **params}).json()
    if "error" in answer:
        assert answer["error"]["data"]["reason"] != "internal", answer
    assert api.call("task.list", per_page=1) is not None
