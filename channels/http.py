"""HTTP plumbing shared by every endpoint: JSON error bodies, body limits, health and metrics.

This is the second of the two places where BatonError becomes a wire answer (the other is the
JSON-RPC adapter): ``{"error": {"code": "<reason>", "message": "<sentence>"}}`` with its HTTP status.
"""
from __future__ import annotations

import json
import logging

from flask import Flask, Response, jsonify, request
from sqlalchemy import func, select, text
from werkzeug.exceptions import HTTPException

from engine.db import db
from engine.errors import BadRequestError, BatonError, PayloadTooLargeError
from engine.models import AiDialog, Instance, Job

log = logging.getLogger("baton.http")

_HTTP_REASONS = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
                 415: "unsupported_media_type", 429: "too_many_requests"}
_RPC_PATHS = ("/v1/rpc", "/rpc")


def parse_json_object(body: bytes) -> dict:
    """A request body that must be one JSON object (NaN and Infinity refused: no database keeps them)."""
    try:
        value = json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRequestError("The body is not valid JSON (NaN and Infinity are not JSON either).") from None
    if not isinstance(value, dict):
        raise BadRequestError(f"The body must be a JSON object, not {type(value).__name__}.")
    return value


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def error_response(error: BatonError) -> Response:
    if request.path in _RPC_PATHS:
        body = {"jsonrpc": "2.0", "id": None,
                "error": {"code": error.rpc_code, "message": error.message, "data": error.rpc_data()}}
    else:
        body = {"error": {"code": error.reason, "message": error.message}}
    response = jsonify(body)
    response.status_code = error.http_status
    return response


def register_http(app: Flask) -> None:
    @app.errorhandler(BatonError)
    def _baton_error(error: BatonError):
        db.session.rollback()
        return error_response(error)

    @app.errorhandler(HTTPException)
    def _http_error(error: HTTPException):
        db.session.rollback()
        if error.code == 413:
            limit = app.config["MAX_CONTENT_LENGTH"]
            return error_response(PayloadTooLargeError(f"The request body is larger than {limit} bytes."))
        response = jsonify({"error": {"code": _HTTP_REASONS.get(error.code, "http_error"),
                                      "message": error.description or error.name}})
        response.status_code = error.code or 500
        if error.code == 405 and hasattr(error, "valid_methods") and error.valid_methods:
            response.headers["Allow"] = ", ".join(error.valid_methods)
        return response

    @app.errorhandler(Exception)
    def _unexpected(error: Exception):
        db.session.rollback()
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
            db.session.execute(text("SELECT 1"))
            db.session.rollback()
        except Exception:
            log.warning("readiness check failed", exc_info=True)
            response = jsonify({"error": {"code": "unavailable", "message": "The database is not reachable."}})
            response.status_code = 503
            return response
        return jsonify({"status": "ready"})

    @app.get("/metrics")
    def metrics():
        counts = db.session.execute(select(Instance.status, func.count()).group_by(Instance.status)).all()
        pending = db.session.execute(select(func.count()).select_from(Job)).scalar_one()
        talking = db.session.execute(select(func.count()).select_from(AiDialog)
                                     .where(AiDialog.status == "active")).scalar_one()
        db.session.rollback()
        lines = ["# HELP baton_instances Process instances by status.", "# TYPE baton_instances gauge"]
        lines += [f'baton_instances{{status="{status}"}} {count}' for status, count in counts]
        lines += ["# HELP baton_jobs_pending Jobs waiting or running.", "# TYPE baton_jobs_pending gauge",
                  f"baton_jobs_pending {pending}",
                  "# HELP baton_ai_dialogs_active AI chat steps holding a dialog.",
                  "# TYPE baton_ai_dialogs_active gauge", f"baton_ai_dialogs_active {talking}"]
        return Response("\n".join(lines) + "\n", mimetype="text/plain; version=0.0.4")
