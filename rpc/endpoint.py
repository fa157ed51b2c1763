"""The JSON-RPC 2.0 endpoint (``POST /v1/rpc``, legacy ``POST /rpc``): the one place RPC errors reach the wire.

Only part of jsonrpcserver 5.0.9 is used, on purpose. Its whole-body ``dispatch`` validates a batch
against one schema (one bad item gives a single -32600 for the whole batch; unknown members are
refused), puts ``str(exception)`` into -32603 and the decoder's message into -32700, crashes on
results ``json`` cannot encode, and knows nothing of API keys or permissions. So this module reads
the body, authenticates, parses, and validates each request object itself; jsonrpcserver's
``dispatch_to_response`` then runs one already-valid request object (the call with our context,
the id attached to the answer, a notification's answer dropped). The function it calls is
``_invoke``, which never raises: it checks the method and permission, calls the handler, maps a
``BatonError`` to its code and scrubs anything else to a generic internal error. An error that
jsonrpcserver makes on its own (it carries no ``data.reason``) is scrubbed the same way.
All jsonrpcserver imports live in this module.
"""
from __future__ import annotations

import json
import logging
import math
import warnings
from dataclasses import replace
from datetime import date, datetime, timezone
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from flask import Blueprint, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

with warnings.catch_warnings():
    # jsonrpcserver 5.0.9 reads its schema with importlib.resources.read_text, deprecated since 3.11.
    warnings.simplefilter("ignore", DeprecationWarning)
    from jsonrpcserver import Error, Success, dispatch_to_response
    from jsonrpcserver.response import to_serializable_one

from engine import audit, json_values
from engine.auth import authenticate
from engine.errors import (BatonError, InvalidParamsError, InvalidRequestError, MethodNotAllowedError,
                           MethodNotFoundError, ParseError, PayloadTooLargeError, TooManyRequestsError,
                           UnauthorizedError)
from engine.store.db import is_nul_refusal, iso
from engine.store.unit_of_work import Then, Units, run_steps
from engine.telemetry import context as log_context
from rpc import openrpc
from rpc.registry import MethodTable, RpcContext

log = logging.getLogger("baton.rpc")

_JSON = "application/json; charset=utf-8"
MAX_BATCH = 100  # requests in one batch (docs/api.md); each runs in its own transaction
_NO_ID = object()


def rpc_blueprint(methods: MethodTable, settings, units: Units, *, specs=None, long_poll=None,
                  rate_limits=None, version: str = "0") -> Blueprint:
    """The endpoint over ``methods`` (``/v1/rpc``, and ``/rpc``, the legacy path where ``process_id``
    stands for ``definition_id``); ``settings``, the spec cache and the long poll reach the handlers in their context;
    ``rate_limits`` (``engine.rate_limits``) counts each HTTP request of a key once, a batch as one.
    ``GET /v1/openrpc.json`` serves the table's OpenRPC document (Baton ``version``) to anyone."""
    bp = Blueprint("rpc", __name__)
    verbs = ["GET", "POST", "PUT", "PATCH", "DELETE"]  # every verb is answered in JSON-RPC's shape
    described = openrpc.document(methods, version=version, url=settings.public_url.rstrip("/") + "/v1/rpc")
    served = json.dumps(described)
    serve = dict(specs=specs, long_poll=long_poll, rate_limits=rate_limits, described=described)

    @bp.route("/v1/rpc", methods=verbs)
    def rpc_v1() -> Response:
        return _serve(methods, settings, units, legacy=False, **serve)

    @bp.route("/rpc", methods=verbs)
    def rpc_legacy() -> Response:
        return _serve(methods, settings, units, legacy=True, **serve)

    @bp.route("/v1/openrpc.json", methods=["GET"])
    def openrpc_document() -> Response:
        # The API's description, nothing of a tenant: any page or tool may read it (OpenRPC's playground).
        response = Response(served, content_type=_JSON)
        response.headers["Access-Control-Allow-Origin"] = "*"
        return response

    @bp.errorhandler(HTTPException)
    def _http_error(error: HTTPException) -> Response:
        # Whatever werkzeug raises inside this endpoint still answers in JSON-RPC's shape.
        exc = PayloadTooLargeError() if error.code == 413 else InvalidRequestError(error.description or error.name)
        return _reply(_error_answer(exc, None), exc.http_status)

    return bp


def _serve(methods: MethodTable, settings, units: Units, *, specs, long_poll, rate_limits, described,
           legacy: bool) -> Response:
    if request.method != "POST":
        exc = MethodNotAllowedError(("POST",), "The JSON-RPC endpoint takes POST requests only.")
        response = _reply(_error_answer(exc, None), exc.http_status)
        response.headers["Allow"] = "POST"
        return response
    # Each call has its own unit of work; the first call's also reads the key (one transaction for
    # a single call, as a batch's calls never hold SQLite's write lock from one to the next).
    uow = units.new("rpc")
    try:
        principal = authenticate(uow, request.headers.get("X-API-Key"))
    except UnauthorizedError as exc:
        uow.rollback()
        return _reply(_error_answer(exc, None), exc.http_status)
    except Exception:
        uow.rollback()
        log.exception("Authenticating a JSON-RPC call failed")
        return _reply(_error_answer(BatonError(), None), 500)
    try:
        return _serve_calls(methods, settings, units, uow, principal, specs, long_poll, rate_limits, described, legacy)
    finally:
        uow.rollback()  # nothing left open, whatever happened (a committed unit has nothing to undo)


def _serve_calls(methods: MethodTable, settings, units: Units, uow, principal, specs, long_poll, rate_limits,
                 described, legacy: bool) -> Response:
    log_context.set_ids(tenant_id=principal.tenant_id)
    if rate_limits is not None:
        try:
            rate_limits.check_key(principal.key_id)
        except TooManyRequestsError as exc:
            response = _reply(_error_answer(exc, None), exc.http_status)
            response.headers.update(exc.http_headers())
            return response
    try:
        body = request.get_data(cache=False)
    except RequestEntityTooLarge:
        exc = PayloadTooLargeError()
        return _reply(_error_answer(exc, None), exc.http_status)
    try:
        payload = json_values.parse(body)
    except json_values.JsonSyntaxError as exc:
        return _reply(_error_answer(ParseError(f"The body is not valid JSON (UTF-8): {exc}."), None))
    except json_values.JsonValueError as exc:
        return _reply(_error_answer(InvalidRequestError(f"{exc}.", data={"where": exc.where}), None))
    uow.actor = principal.actor
    context = RpcContext(principal=principal, settings=settings, legacy=legacy, methods=methods, specs=specs,
                         long_poll=long_poll, openrpc=described, uow=uow, units=units)
    if not isinstance(payload, list):
        return _reply(_answer(payload, context, methods, depth=0))
    if not payload:
        return _reply(_error_answer(InvalidRequestError("A batch must contain at least one request."), None))
    if len(payload) > MAX_BATCH:
        return _reply(_error_answer(InvalidRequestError(
            f"A batch may hold at most {MAX_BATCH} requests; this one holds {len(payload)}.",
            data={"max_batch": MAX_BATCH}), None))
    answers = []
    for index, item in enumerate(payload):
        call_context = context if index == 0 else replace(context, uow=units.new("rpc", principal.actor))
        answer = _answer(item, call_context, methods, depth=1)
        if answer is not None:
            answers.append(answer)
    return _reply(answers or None)


def _reply(payload: Any, status: int = 200) -> Response:
    if payload is None:  # a notification or a batch of notifications: no answer at all
        response = Response(status=204)
        del response.headers["Content-Type"]
        return response
    return Response(json.dumps(payload, allow_nan=False), status=status, content_type=_JSON)


def _error_answer(exc: BatonError, request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "error": exc.to_rpc(), "id": request_id}


def _is_valid_id(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return True
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _request_problem(item: dict[str, Any]) -> str | None:
    """Why ``item`` is not a JSON-RPC 2.0 request object, or None. Unknown members are ignored."""
    if item.get("jsonrpc") != "2.0":
        return "The member 'jsonrpc' must be exactly \"2.0\"."
    if not isinstance(item.get("method"), str):
        return "The member 'method' must be a string."
    if "params" in item and not isinstance(item["params"], (dict, list)):
        return "The member 'params' must be an object or an array."
    return None


def _answer(item: Any, context: RpcContext, methods: MethodTable, depth: int) -> dict[str, Any] | None:
    """The answer to one request object, or None for a notification; ``depth``: 1 inside a batch.
    Each call ends its own unit of work (``_invoke`` commits it; anything else rolls it back): a
    batch never holds SQLite's write lock from call to call."""
    try:
        return _answer_one(item, context, methods, depth)
    finally:
        _rollback(context.uow)


def _answer_one(item: Any, context: RpcContext, methods: MethodTable, depth: int) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return _error_answer(InvalidRequestError("A request must be a JSON object."), None)
    request_id = item.get("id", _NO_ID)
    if request_id is not _NO_ID and (not _is_valid_id(request_id)
                                     or json_values.problem(request_id, "id") is not None):
        return _error_answer(InvalidRequestError(
            "The member 'id' must be a string of valid Unicode, a finite number or null."), None)
    shown_id = None if request_id is _NO_ID else request_id
    envelope_problem = json_values.problem({k: v for k, v in item.items() if k != "params"}, "request", depth)
    if envelope_problem is not None:
        return _error_answer(InvalidRequestError(f"{envelope_problem}.", data={"where": envelope_problem.where}),
                             shown_id)
    problem = _request_problem(item)
    if problem is not None:
        # An invalid request is answered even without an id: it cannot be trusted to be a notification.
        return _error_answer(InvalidRequestError(problem), shown_id)
    name, params = item["method"], item.get("params", {})
    params_problem = json_values.problem(params, "params", depth + 1)
    if params_problem is not None:
        where = params_problem.where
        param = where.removeprefix("params").lstrip(".").split(".")[0].split("[")[0] or None
        exc = InvalidParamsError(f"{params_problem}.", data={"param": param, "where": where})
        return _error_answer(exc, shown_id) if request_id is not _NO_ID else None
    plain = {"jsonrpc": "2.0", "method": name}
    if request_id is not _NO_ID:
        plain["id"] = request_id
    response = dispatch_to_response(
        plain,  # already parsed: the deserializer passes it through as is
        {name: lambda ctx: _invoke(ctx, methods, name, params)},
        context=context, deserializer=_as_is, validator=_as_is)
    if response is None:
        return None
    answer = to_serializable_one(response)
    error = answer.get("error")
    if error is not None and not (isinstance(error.get("data"), dict) and "reason" in error["data"]):
        log.error("jsonrpcserver answered %r for method %r", error, name)  # not from _invoke
        return _error_answer(BatonError(), answer.get("id"))
    return answer


def _as_is(value: Any) -> Any:
    return value


def _invoke(context: RpcContext, methods: MethodTable, name: str, params: Any) -> Any:
    """Run one method; a jsonrpcserver Success or Error, never an exception."""
    try:
        method = methods.get(name)
        if method is None:
            shown = name if len(name) <= 100 else name[:100] + "..."
            raise MethodNotFoundError(f"Method '{shown}' not found.", data={"method": shown})
        method.require(context.principal)
        if not isinstance(params, dict):
            raise InvalidParamsError("Params must be an object of named parameters.")
        if context.legacy:
            params = _legacy_params(params)
        result = method.call(context, params)
        if method.audit is not None:
            result = _audited(context, method, params, result)
        context.uow.commit()
        # A method that calls another server between its writes (a messenger's webhook) says so
        # with ``Then``s: each call with no unit of work open, each step in one of its own.
        result = run_steps(context.units, "rpc", context.principal.actor, result)
        return Success(_jsonable(result))
    except BatonError as exc:
        _rollback(context.uow)
        return _baton_error(exc)
    except Exception as exc:
        _rollback(context.uow)
        if is_nul_refusal(exc):
            return _baton_error(InvalidParamsError(
                "A parameter holds a NUL character (U+0000) where Baton cannot keep one."))
        log.exception("JSON-RPC method %r failed (tenant %s)", name,
                      getattr(context.principal, "tenant_id", None))
        return _baton_error(BatonError())


def _audited(context: RpcContext, method, params: dict, result: Any) -> Any:
    """Record an administration call in the unit of work that stores its change: the call's own,
    or, for a method whose change follows a call to another server (``Then``), its last step's."""
    principal = context.principal

    def record(uow, answer) -> None:
        audit.record(uow, principal.tenant_id, actor_type="api_key", actor=principal.name, key_id=principal.key_id,
                     method=method.name, target_kind=method.audit.kind,
                     target_id=method.audit.target_id(params, answer))

    def followed(then: Then) -> Then:
        def step(uow, value):
            answer = then.step(uow, value)
            if isinstance(answer, Then):
                return followed(answer)
            record(uow, answer)
            return answer
        return Then(step=step, call=then.call)

    if isinstance(result, Then):
        return followed(result)
    record(context.uow, result)
    return result


def _baton_error(exc: BatonError) -> Any:
    error = exc.to_rpc()
    try:
        data = _jsonable(error["data"])
    except (TypeError, ValueError, RecursionError):
        log.exception("The data of %s cannot be JSON", type(exc).__name__)
        data = {"reason": exc.reason}
    return Error(error["code"], str(error["message"]), data)


def _legacy_params(params: dict[str, Any]) -> dict[str, Any]:
    """``/rpc`` says ``process_id`` where ``/v1/rpc`` says ``definition_id``."""
    if "process_id" not in params:
        return params
    if "definition_id" in params:
        raise InvalidParamsError("Give either 'process_id' or 'definition_id', not both.",
                                 data={"param": "process_id"})
    renamed = {key: value for key, value in params.items() if key != "process_id"}
    renamed["definition_id"] = params["process_id"]
    return renamed


def _rollback(uow) -> None:
    try:
        uow.rollback()
    except Exception:
        log.exception("Rolling back after a failed JSON-RPC method failed too")


# An answer nests its values a few levels down (``{"items": [{"variables": ...}]}``); a stored value
# deeper than the limit (a row written before it) is shown as a marker, never a failed answer.
_MAX_ANSWER_DEPTH = json_values.MAX_DEPTH + 8


def _jsonable(value: Any, depth: int = 0) -> Any:
    """``value`` with datetimes as ISO 8601 UTC strings; TypeError/ValueError if it cannot be JSON.
    A float that is not finite, text with a lone surrogate or nesting past the limit (stored before
    the door refused them) become ``json_values.UNREADABLE`` markers."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return json_values.readable(value) if json_values.has_surrogate(value) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else json_values.readable(value)
    if isinstance(value, (dict, list, tuple, set, frozenset)) and depth >= _MAX_ANSWER_DEPTH:
        return json_values.UNREADABLE.format(f"nested deeper than {json_values.MAX_DEPTH} levels")
    if isinstance(value, dict):
        return {_jsonable_key(key): _jsonable(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(item, depth + 1) for item in value]
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return iso(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return _jsonable(int(value) if value == value.to_integral_value() else float(value))
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Enum):
        return _jsonable(value.value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _jsonable_key(key: Any) -> str:
    if isinstance(key, str):
        return key.encode("utf-8", "backslashreplace").decode() if json_values.has_surrogate(key) else key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)  # what json.dumps itself does with such keys
    raise TypeError(f"a {type(key).__name__} cannot be a JSON object key")
