"""HTTP plumbing shared by every endpoint: the unit of work of a request, JSON error bodies, body
limits, health.

This is the second of the two places where BatonError becomes a wire answer (the other is the
JSON-RPC adapter, which also answers its own endpoint's HTTP errors): ``BatonError.to_http()``.
"""
from __future__ import annotations

import logging

from contextlib import AbstractContextManager

from flask import Flask, Response, current_app, jsonify, request
from sqlalchemy import text
from werkzeug.exceptions import HTTPException

from engine import json_values
from engine.errors import BadRequestError, BatonError, HttpStatusError, MethodNotAllowedError, PayloadTooLargeError
from engine.store.db import db, is_nul_refusal
from engine.store.unit_of_work import SYSTEM, Actor, UnitOfWork

log = logging.getLogger("baton.http")

_HTTP_REASONS = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
                 415: "unsupported_media_type", 429: "too_many_requests"}


def unit_of_work(owner: str, actor: Actor = SYSTEM) -> AbstractContextManager[UnitOfWork]:
    """The request's unit of work: committed when the block completes, rolled back if it raises.
    Every door begins its own here (``owner`` names the door in ``baton_transactions_total``)."""
    return current_app.extensions["baton.units"].begin(owner, actor)


def nul_refused() -> BadRequestError:
    """A caller's NUL that reached a query PostgreSQL refuses (engine.store.db.is_nul_refusal)."""
    return BadRequestError("The request holds a NUL character (U+0000) where Baton cannot keep one.")


def parse_json_object(body: bytes) -> dict:
    """A request body that must be one JSON object within Baton's limits (``engine.json_values``:
    no NaN, Infinity or overflowing number, no nesting past the limit, no lone surrogate)."""
    try:
        value = json_values.parse_checked(body)
    except json_values.JsonSyntaxError as exc:
        raise BadRequestError(f"The body is not valid JSON: {exc}.") from None
    except json_values.JsonValueError as exc:
        raise BadRequestError(f"The body is refused at {exc}.", data={"where": exc.where}) from None
    if not isinstance(value, dict):
        raise BadRequestError(f"The body must be a JSON object, not {_json_type(value)}.")
    return value


def _json_type(value) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def _translated(error: HTTPException, max_body_bytes: int) -> BatonError:
    """Werkzeug's own refusals (no route, wrong method, body too large ...) as errors of the tree."""
    if error.code == 413:
        return PayloadTooLargeError(f"The request body is larger than {max_body_bytes} bytes.")
    if error.code == 405:
        return MethodNotAllowedError(tuple(getattr(error, "valid_methods", None) or ()),
                                     error.description or error.name)
    code = error.code or 500
    return HttpStatusError(code, _HTTP_REASONS.get(code, "http_error"), error.description or error.name)


def error_response(error: BatonError) -> Response:
    status, body = error.to_http()
    response = jsonify(body)
    response.status_code = status
    response.headers.update(error.http_headers())
    return response


def register_http(app: Flask) -> None:
    @app.errorhandler(BatonError)
    def _baton_error(error: BatonError):
        return error_response(error)

    @app.errorhandler(HTTPException)
    def _http_error(error: HTTPException):
        response = error_response(_translated(error, app.config["MAX_CONTENT_LENGTH"]))
        if error.code == 405 and getattr(error, "valid_methods", None):
            response.headers["Allow"] = ", ".join(error.valid_methods)
        return response

    @app.errorhandler(Exception)
    def _unexpected(error: Exception):
        if is_nul_refusal(error):
            return error_response(nul_refused())
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(BatonError())

    @app.teardown_appcontext
    def _end_session(_exc):
        db.session.remove()

    @app.get("/healthz")
    def healthz():
        return jsonify({"status": "ok"})

    @app.get("/readyz")
    def readyz():
        try:
            with unit_of_work("readyz") as uow:
                uow.execute(text("SELECT 1"))
                uow.end_read()
        except Exception:
            log.warning("readiness check failed", exc_info=True)
            response = jsonify({"error": {"code": "unavailable", "message": "The database is not reachable."}})
            response.status_code = 503
            return response
        return jsonify({"status": "ready"})
