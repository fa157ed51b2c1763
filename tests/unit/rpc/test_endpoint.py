"""The JSON-RPC adapter through Flask's test client: a real in-memory SQLite, real API keys."""
from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone

import pytest
from flask import Flask
from sqlalchemy import func, select

from app import Settings
from engine import auth
from engine.errors import BpmnValidationError, ConflictError, InvalidParamsError, NotFoundError
from engine.store.db import db
from engine.store.unit_of_work import Units
from engine.store.models import Tenant
from rpc import endpoint
from rpc.params import require_int
from rpc.registry import ANY_KEY, MethodTable, RpcMethod


@pytest.fixture
def app():
    app = Flask(__name__)
    app.config.update(SQLALCHEMY_DATABASE_URI="sqlite://", MAX_CONTENT_LENGTH=4096)
    db.init_app(app)
    units = app.extensions["baton.units"] = Units(None)
    app.register_blueprint(endpoint.rpc_blueprint(_test_methods(), Settings(), units))
    with app.app_context():
        db.create_all()
    return app


@pytest.fixture
def keys(app, uow):
    """An admin key, a key that may only call ``test.echo``, and a revoked key."""
    with app.app_context():
        tenant, admin = auth.create_tenant(uow, "acme")
        _, echo_only = auth.create_key(uow, tenant.id, "echo only", ["test.echo"])
        revoked_row, revoked = auth.create_key(uow, tenant.id, "old", ["*"])
        uow.commit()
        auth.revoke_key(uow, tenant.id, revoked_row.id)
        uow.commit()
    return {"admin": admin, "echo_only": echo_only, "revoked": revoked}


def _test_methods() -> MethodTable:
    """Test methods, in a table of their own."""

    def echo(ctx, params):
        return {"params": params, "tenant_id": ctx.tenant_id, "legacy": ctx.legacy}

    def admin_only(ctx, params):
        return {"ok": True}

    def get(ctx, params):
        instance_id = require_int(params, "instance_id")
        raise NotFoundError(f"Instance {instance_id} not found.")

    def conflict(ctx, params):
        raise ConflictError("Task 3 is already completed.")

    def deploy(ctx, params):
        raise BpmnValidationError([{"element_id": "Task_1", "line": 7, "message": "unsupported element"}])

    def boom(ctx, params):
        raise RuntimeError("secret detail")

    def times(ctx, params):
        return {"naive": datetime(2026, 11, 22, 10, 15, 0, 123456),
                "aware": datetime(2026, 11, 22, 12, 15, tzinfo=timezone(timedelta(hours=2))),
                "day": datetime(2026, 11, 22).date()}

    def unencodable(ctx, params):
        return {"thing": object()}

    def add_tenant(ctx, params):
        db.session.add(Tenant(name=params["name"]))
        if params.get("fail") == "baton":
            raise ConflictError("Refused after writing.")
        if params.get("fail") == "bug":
            raise RuntimeError("bug after writing")
        db.session.commit()
        return {"added": params["name"]}

    def whoami(ctx, params):
        return {"methods": ctx.methods.callable_by(ctx.principal)}

    return MethodTable([
        RpcMethod("test.echo", echo),
        RpcMethod("test.whoami", whoami, ANY_KEY),
        RpcMethod("test.admin_only", admin_only, "admin"),
        RpcMethod("test.get", get),
        RpcMethod("test.conflict", conflict),
        RpcMethod("test.deploy", deploy),
        RpcMethod("test.boom", boom),
        RpcMethod("test.times", times),
        RpcMethod("test.unencodable", unencodable),
        RpcMethod("test.add_tenant", add_tenant),
    ])


@pytest.fixture
def call(app, keys):
    client = app.test_client()

    def call(body, *, key="admin", path="/v1/rpc", raw=False):
        headers = {"X-API-Key": keys[key]} if key else {}
        data = body if raw else json.dumps(body)
        return client.post(path, data=data, headers=headers, content_type="application/json")

    return call


def req(method, params=None, id=1, **extra):
    body = {"jsonrpc": "2.0", "method": method, "id": id, **extra}
    if params is not None:
        body["params"] = params
    return body


def note(method, params=None):
    body = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        body["params"] = params
    return body


def error_of(response_json):
    return response_json["error"]["code"], response_json["error"]["data"]["reason"]


# --- success and ids -------------------------------------------------------------------------

def test_a_call_answers_its_result_with_the_same_id_as_json(call):
    response = call(req("test.echo", {"a": 1}, id=7))

    assert response.status_code == 200
    assert response.content_type == "application/json; charset=utf-8"
    assert response.json == {"jsonrpc": "2.0", "id": 7,
                             "result": {"params": {"a": 1}, "tenant_id": 1, "legacy": False}}


@pytest.mark.parametrize("request_id", ["abc", "", 0, -7, 1.5, 2**53 + 1, None])
def test_an_id_of_any_json_type_comes_back_unchanged(call, request_id):
    response = call(req("test.echo", id=request_id))

    assert response.status_code == 200
    assert "id" in response.json
    assert response.json["id"] == request_id
    assert type(response.json["id"]) is type(request_id)


def test_a_float_id_comes_back_with_its_fraction_in_the_body_text(call):
    response = call('{"jsonrpc": "2.0", "method": "test.echo", "id": 1.0}', raw=True)

    assert '"id": 1.0' in response.get_data(as_text=True)


def test_absent_params_reach_the_handler_as_an_empty_object(call):
    response = call(req("test.echo"))

    assert response.json["result"]["params"] == {}


def test_param_names_that_shadow_python_arguments_are_passed_through(call):
    response = call(req("test.echo", {"ctx": 1, "context": 2, "self": 3, "name": 4}))

    assert response.json["result"]["params"] == {"ctx": 1, "context": 2, "self": 3, "name": 4}


def test_unknown_members_of_a_request_object_are_ignored(call):
    response = call(req("test.echo", {"a": 1}, trace="x"))

    assert response.json["result"]["params"] == {"a": 1}


# --- the error table (docs/api.md, "Errors") --------------------------------------------------------

@pytest.mark.parametrize("body", [b"not json", b"{\"jsonrpc\": \"2.0\", ", b"", b"\xff\xfe{}"])
def test_a_body_that_is_not_json_is_a_parse_error_with_a_null_id(call, body):
    response = call(body, raw=True)

    assert response.status_code == 200
    assert error_of(response.json) == (-32700, "parse_error")
    assert response.json["id"] is None


def test_nan_as_the_id_is_an_invalid_request_with_a_null_id(call):
    response = call(b'{"jsonrpc": "2.0", "method": "test.echo", "id": NaN}', raw=True)

    assert error_of(response.json) == (-32600, "invalid_request")
    assert response.json["id"] is None


def test_a_non_utf8_body_is_a_parse_error(call):
    response = call('{"jsonrpc": "2.0", "method": "test.echo", "params": {"a": "é"}, "id": 1}'
                    .encode("latin-1"), raw=True)

    assert error_of(response.json) == (-32700, "parse_error")


@pytest.mark.parametrize("body", [42, "text", None, True])
def test_a_body_that_is_neither_object_nor_array_is_an_invalid_request(call, body):
    response = call(body)

    assert error_of(response.json) == (-32600, "invalid_request")
    assert response.json["id"] is None


@pytest.mark.parametrize("body", [
    {"method": "test.echo", "id": 3},
    {"jsonrpc": "1.0", "method": "test.echo", "id": 3},
    {"jsonrpc": 2.0, "method": "test.echo", "id": 3},
    {"jsonrpc": "2.0", "id": 3},
    {"jsonrpc": "2.0", "method": 5, "id": 3},
    {"jsonrpc": "2.0", "method": "test.echo", "params": "a", "id": 3},
    {"jsonrpc": "2.0", "method": "test.echo", "params": None, "id": 3},
])
def test_a_malformed_request_object_is_an_invalid_request_keeping_its_id(call, body):
    response = call(body)

    assert error_of(response.json) == (-32600, "invalid_request")
    assert response.json["id"] == 3


@pytest.mark.parametrize("bad_id", [True, [1], {"a": 1}])
def test_an_id_of_a_wrong_type_is_an_invalid_request_answered_with_a_null_id(call, bad_id):
    response = call(req("test.echo", id=bad_id))

    assert error_of(response.json) == (-32600, "invalid_request")
    assert response.json["id"] is None


def test_an_unknown_method_is_method_not_found(call):
    response = call(req("no.such_method", id="m"))

    assert error_of(response.json) == (-32601, "method_not_found")
    assert response.json["id"] == "m"


def test_positional_params_are_invalid_params(call):
    response = call(req("test.echo", [1, 2]))

    assert error_of(response.json) == (-32602, "invalid_params")


def test_a_mistyped_parameter_is_invalid_params_naming_it(call):
    response = call(req("test.get", {"instance_id": "7"}))

    assert error_of(response.json) == (-32602, "invalid_params")
    assert "'instance_id'" in response.json["error"]["message"]


def test_a_missing_object_is_not_found(call):
    response = call(req("test.get", {"instance_id": 7}))

    assert error_of(response.json) == (-32602, "not_found")
    assert response.json["error"]["message"] == "Instance 7 not found."


def test_a_state_that_forbids_the_call_is_a_conflict(call):
    response = call(req("test.conflict"))

    assert error_of(response.json) == (-32602, "conflict")


def test_a_bpmn_refusal_carries_its_errors_in_data(call):
    response = call(req("test.deploy"))

    assert error_of(response.json) == (-32602, "invalid_params")
    assert response.json["error"]["data"]["errors"] == [
        {"element_id": "Task_1", "line": 7, "message": "unsupported element"}]


@pytest.mark.parametrize("key", [None, "bt_nonsense", "revoked"])
def test_a_missing_unknown_or_revoked_key_is_http_401_with_a_json_rpc_error(app, keys, key):
    headers = {} if key is None else {"X-API-Key": keys.get(key, key)}

    response = app.test_client().post("/v1/rpc", json=req("test.echo"), headers=headers)

    assert response.status_code == 401
    assert error_of(response.json) == (-32603, "unauthorized")
    assert response.json["id"] is None


def test_a_key_without_the_permission_is_forbidden_naming_it(call):
    response = call(req("test.admin_only"), key="echo_only")

    assert response.status_code == 200
    assert error_of(response.json) == (-32603, "forbidden")
    assert response.json["error"]["data"]["permission"] == "admin"


def test_a_key_with_the_permission_may_call_the_method(call):
    response = call(req("test.echo"), key="echo_only")

    assert "result" in response.json


def test_a_method_open_to_any_key_needs_no_grant_and_sees_the_table_it_came_through(call):
    narrow = call(req("test.whoami"), key="echo_only").json["result"]
    full = call(req("test.whoami")).json["result"]

    assert narrow == {"methods": ["test.echo", "test.whoami"]}
    assert "test.admin_only" in full["methods"] and len(full["methods"]) == 10


def test_any_key_is_no_permission_a_key_can_be_given(app):
    with app.app_context():
        with pytest.raises(InvalidParamsError, match="invalid entry 'any key'"):
            auth.validate_permissions([ANY_KEY])


def test_an_unexpected_exception_is_a_generic_internal_error(call, caplog):
    with caplog.at_level(logging.ERROR, logger="baton.rpc"):
        response = call(req("test.boom", id=5))

    text = response.get_data(as_text=True)
    assert response.status_code == 200
    assert error_of(response.json) == (-32603, "internal")
    assert response.json["id"] == 5
    assert "secret detail" not in text
    assert "Traceback" not in text and "RuntimeError" not in text
    logged = [r for r in caplog.records if r.name == "baton.rpc" and r.exc_info]
    assert logged and "secret detail" in str(logged[0].exc_info[1])


# --- batches and notifications ---------------------------------------------------------------

def test_an_empty_batch_is_one_invalid_request_error_not_an_array(call):
    response = call([])

    assert isinstance(response.json, dict)
    assert error_of(response.json) == (-32600, "invalid_request")
    assert response.json["id"] is None


def test_each_batch_item_is_validated_on_its_own_and_answered_in_order(call):
    response = call([
        req("test.echo", {"n": 1}, id="first"),
        1,
        {"jsonrpc": "2.0", "method": 1, "id": 2},
        {"foo": "boo"},
        note("test.echo"),
        req("no.such_method", id=3),
        req("test.boom", id=4),
        req("test.echo", [1], id=5),
        req("test.echo", {"n": 6}, id=6),
    ])

    assert response.status_code == 200
    answers = response.json
    assert [a["id"] for a in answers] == ["first", None, 2, None, 3, 4, 5, 6]
    assert answers[0]["result"]["params"] == {"n": 1}
    assert [error_of(a) for a in answers[1:7]] == [
        (-32600, "invalid_request"), (-32600, "invalid_request"), (-32600, "invalid_request"),
        (-32601, "method_not_found"), (-32603, "internal"), (-32602, "invalid_params")]
    assert answers[7]["result"]["params"] == {"n": 6}


def test_a_batch_of_one_request_answers_an_array_of_one(call):
    response = call([req("test.echo")])

    assert isinstance(response.json, list) and len(response.json) == 1


def test_a_notification_gets_http_204_and_no_body(call):
    response = call(note("test.echo"))

    assert response.status_code == 204
    assert response.get_data() == b""


def test_a_failing_notification_gets_no_answer_either(call):
    response = call(note("test.boom"))

    assert response.status_code == 204
    assert response.get_data() == b""


def test_an_all_notification_batch_gets_http_204_and_no_body(call):
    response = call([note("test.echo"), note("no.such_method"), note("test.echo", [1])])

    assert response.status_code == 204
    assert response.get_data() == b""


def test_a_notification_still_runs_its_method(call, app):
    call(note("test.add_tenant", {"name": "from a notification"}))

    with app.app_context():
        assert db.session.execute(select(Tenant).where(Tenant.name == "from a notification")).scalar()


def test_a_notification_without_a_key_is_still_http_401(call):
    response = call(note("test.echo"), key=None)

    assert response.status_code == 401


# --- legacy path -----------------------------------------------------------------------------

def test_the_legacy_path_takes_process_id_as_definition_id(call):
    response = call(req("test.echo", {"process_id": 4, "variables": {}}), path="/rpc")

    assert response.json["result"]["params"] == {"definition_id": 4, "variables": {}}
    assert response.json["result"]["legacy"] is True


def test_the_legacy_path_refuses_process_id_together_with_definition_id(call):
    response = call(req("test.echo", {"process_id": 4, "definition_id": 5}), path="/rpc")

    assert error_of(response.json) == (-32602, "invalid_params")
    assert "process_id" in response.json["error"]["message"]


def test_the_v1_path_does_not_rename_process_id(call):
    response = call(req("test.echo", {"process_id": 4}))

    assert response.json["result"]["params"] == {"process_id": 4}


# --- results and the database ----------------------------------------------------------------

def test_datetimes_in_a_result_become_iso_8601_utc_strings(call):
    response = call(req("test.times"))

    assert response.json["result"] == {"naive": "2026-11-22T10:15:00.123Z",
                                        "aware": "2026-11-22T10:15:00.000Z",
                                        "day": "2026-11-22"}


def test_a_result_that_cannot_be_json_is_an_internal_error_for_that_item_only(call):
    response = call([req("test.unencodable", id=1), req("test.echo", id=2)])

    assert error_of(response.json[0]) == (-32603, "internal")
    assert "object" not in response.json[0]["error"]["message"]
    assert "result" in response.json[1]


@pytest.mark.parametrize("failure", ["baton", "bug"])
def test_a_failed_items_writes_are_rolled_back_before_the_next_item_commits(call, app, failure):
    response = call([req("test.add_tenant", {"name": "failed", "fail": failure}, id=1),
                     req("test.add_tenant", {"name": "kept"}, id=2)])

    assert "error" in response.json[0] and "result" in response.json[1]
    with app.app_context():
        names = set(db.session.execute(select(Tenant.name)).scalars())
    assert "kept" in names
    assert "failed" not in names


def test_a_body_over_the_size_limit_is_http_413(call):
    response = call(req("test.echo", {"pad": "x" * 5000}))

    assert response.status_code == 413
    assert error_of(response.json) == (-32600, "payload_too_large")


def test_a_body_over_the_size_limit_stores_nothing(call, app):
    call(req("test.add_tenant", {"name": "big", "pad": "x" * 5000}))

    with app.app_context():
        assert db.session.execute(select(func.count()).select_from(Tenant)).scalar() == 1


@pytest.mark.parametrize("verb", ["get", "put", "patch", "delete"])
@pytest.mark.parametrize("path", ["/v1/rpc", "/rpc"])
def test_any_other_http_verb_is_a_405_in_json_rpc_shape(app, verb, path):
    response = getattr(app.test_client(), verb)(path)
    assert response.status_code == 405 and response.headers["Allow"] == "POST"
    body = response.get_json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert (body["error"]["code"], body["error"]["data"]["reason"]) == (-32600, "method_not_allowed")
