"""``POST /webhooks/inbound/{webhook_id}``: a call starts the latest version of the route's process.

Two doors, one accept (``engine.webhooks.accept``): ``WebhookDoor``, a thin WSGI layer in front
of Flask, takes every such call that carries a Content-Length within the limit (the hottest
request Baton serves: Flask's request and routing layers cost more than the accept itself); the
Flask route takes the rest (a chunked body, an oversized one, debug mode). Both apply the
per-webhook rate limit first, read the body the same way, and render errors with ``refusal``
(``BatonError.to_http()``, counted in ``baton_webhook_refusals_total``).
"""
from __future__ import annotations

import io
import json
import logging
from http import HTTPStatus
from functools import partial
from urllib.parse import parse_qsl

from flask import Blueprint, current_app, jsonify, request
from werkzeug.exceptions import HTTPException

from channels.http import nul_refused, error_response, parse_json_object
from channels.request_layer import ROUTE
from engine import webhooks
from engine.errors import BadRequestError, BatonError
from engine.store.db import is_nul_refusal
from engine.store.unit_of_work import Actor, Units
from engine.telemetry import metrics

bp = Blueprint("webhook", __name__)
log = logging.getLogger("baton.webhook")

PREFIX = "/webhooks/inbound/"
RULE = PREFIX + "<webhook_id>"


def refusal(error: BatonError) -> BatonError:
    """``error``, counted by its reason as a refused call (both doors answer every refusal through here)."""
    metrics.WEBHOOK_REFUSALS.labels(error.reason).inc()
    return error


def read_variables(body: bytes, mimetype: str | None) -> dict | BadRequestError:
    """A JSON object, form fields (strings, the first of repeated names) or nothing at all; or the
    error that says why the body is none of these."""
    try:
        if not body.strip():
            return {}
        if mimetype == "application/x-www-form-urlencoded":
            fields: dict[str, str] = {}
            for name, value in parse_qsl(body.decode("utf-8"), keep_blank_values=True):
                fields.setdefault(name, value)
            return fields
        if mimetype and mimetype != "application/json" and not mimetype.endswith("+json"):
            raise BadRequestError(f"Unsupported Content-Type '{mimetype}': send application/json "
                                  "or application/x-www-form-urlencoded.")
        return parse_json_object(body)
    except UnicodeDecodeError:
        return BadRequestError("The form body is not valid UTF-8.")
    except BadRequestError as exc:
        return exc


def _call(webhook_id: str, body: bytes, mimetype: str | None, headers) -> webhooks.WebhookCall:
    standard = tuple(headers.get(name) for name in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    return webhooks.WebhookCall(webhook_id, body, read_variables(body, mimetype),
                                signature=headers.get("X-Baton-Signature"),
                                idempotency_key=headers.get("Idempotency-Key"),
                                standard=standard if any(value is not None for value in standard) else None)


def accept(units: Units, call: webhooks.WebhookCall) -> dict:
    """The call's unit of work (its actor: the webhook, named by the start of its id only: the id is
    a credential), committed once the instance and its start job are written."""
    with units.begin("webhook", Actor("webhook", call.webhook_id[:8])) as uow:
        return webhooks.accept(uow, call)


@bp.post(RULE)
def inbound(webhook_id: str):
    baton = current_app.extensions["baton"]
    try:
        baton.rate_limits.check_webhook(webhook_id)
        body = request.get_data(cache=False)
        call = _call(webhook_id, body, request.mimetype or None, request.headers)
        answer = accept(baton.units, call)
    except BatonError as exc:
        return error_response(refusal(exc))
    except HTTPException:
        raise  # werkzeug's own (a body over the limit): the app's handler answers it
    except Exception as exc:
        if is_nul_refusal(exc):
            return error_response(refusal(nul_refused()))
        log.exception("webhook %s failed", webhook_id[:16])
        return error_response(refusal(BatonError()))
    response = jsonify(answer)
    response.status_code = 202
    return response


class _Headers:
    """The headers the accept reads, from a WSGI environ."""

    def __init__(self, environ):
        self.environ = environ

    def get(self, name: str):
        return self.environ.get("HTTP_" + name.upper().replace("-", "_"))


class WebhookDoor:
    """WSGI middleware: ``POST /webhooks/inbound/{id}`` with a Content-Length within the limit is
    accepted here; anything else goes to Flask untouched."""

    def __init__(self, wsgi_app, units: Units, max_body_bytes: int, rate_limits):
        self.wsgi_app = wsgi_app
        self.accept = partial(accept, units)
        self.max_body_bytes = max_body_bytes
        self.rate_limits = rate_limits

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "POST" or not path.startswith(PREFIX) \
                or "HTTP_TRANSFER_ENCODING" in environ:
            return self.wsgi_app(environ, start_response)
        webhook_id = path[len(PREFIX):]
        try:
            length = int(environ.get("CONTENT_LENGTH") or "0")
        except ValueError:
            length = -1
        if not webhook_id or "/" in webhook_id or not 0 <= length <= self.max_body_bytes:
            return self.wsgi_app(environ, start_response)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        if len(body) != length:  # the client sent less than it announced
            return self.wsgi_app(environ, start_response)
        environ[ROUTE] = RULE
        mimetype = environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower() or None
        headers: dict[str, str] = {}
        try:
            self.rate_limits.check_webhook(webhook_id)
            status, answer = 202, self.accept(_call(webhook_id, body, mimetype, _Headers(environ)))
        except Exception as exc:
            if is_nul_refusal(exc):
                exc = nul_refused()
            elif not isinstance(exc, BatonError):
                log.exception("webhook %s failed", webhook_id[:16])
                exc = BatonError()
            status, answer = refusal(exc).to_http()
            headers = exc.http_headers()
        payload = (json.dumps(answer, separators=(",", ":")) + "\n").encode()
        start_response(f"{status} {HTTPStatus(status).phrase}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(payload))),
                        *headers.items()])
        return [payload]

