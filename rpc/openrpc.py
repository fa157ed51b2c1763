"""The OpenRPC 1.3 document of a method table: every method with the JSON Schemas its declaration
gives (``rpc.schema``), served by ``rpc.discover`` and ``GET /v1/openrpc.json``."""
from __future__ import annotations

from typing import Any

from engine import errors
from rpc.registry import MethodTable, RpcMethod

OPENRPC_VERSION = "1.3.2"
# The errors every method may answer, by ``data.reason`` (docs/api.md, Errors).
_ERRORS = (errors.ParseError, errors.InvalidRequestError, errors.MethodNotFoundError, errors.InvalidParamsError,
           errors.NotFoundError, errors.ConflictError, errors.UnauthorizedError, errors.ForbiddenError,
           errors.PayloadTooLargeError, errors.TooManyRequestsError, errors.OutboundRefusedError,
           errors.OutboundError, errors.MessengerUnavailableError, errors.BatonError)


def document(methods: MethodTable, *, version: str, url: str) -> dict[str, Any]:
    """The document for ``methods``, served at ``url`` (the JSON-RPC endpoint)."""
    return {
        "openrpc": OPENRPC_VERSION,
        "info": {"title": "Baton", "version": version,
                 "description": "A BPMN process engine service. Params are by name; every error carries "
                                "data.reason (components.errors); x-permission is what an API key needs."},
        "servers": [{"name": "Baton", "url": url}],
        "methods": [describe(method) for method in methods.values()],
        "components": {"errors": {error.reason: {"code": error.rpc_code, "message": _first_line(error),
                                                 "data": {"reason": error.reason}} for error in _ERRORS}},
    }


def describe(method: RpcMethod) -> dict[str, Any]:
    described: dict[str, Any] = {"name": method.name, "tags": [{"name": method.name.split(".")[0]}],
                                 "paramStructure": "by-name", "x-permission": method.needs}
    if method.summary:
        described["summary"] = method.summary
    if method.params is None:
        described["params"] = []
        described["x-params-undeclared"] = True  # checked by the handler itself (rpc.registry)
    else:
        described["params"] = [_param(param) for param in method.params]
    described["result"] = {"name": "result", "schema": method.result}
    return described


def _param(param) -> dict[str, Any]:
    described = {"name": param.name, "required": param.required, "schema": param.schema(described=False)}
    if param.description:
        described["description"] = param.description
    return described


def _first_line(error: type[errors.BatonError]) -> str:
    return (error.__doc__ or "").strip().splitlines()[0]
