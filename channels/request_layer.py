"""The outermost WSGI layer: every request gets an id (the caller's ``X-Request-Id`` when it is a
sane one, else a new one; answered in ``X-Request-Id`` and carried by its log lines) and is counted
in the request metrics by route, method and status, with the time its answer took.

The route is the matched URL rule (``/webhooks/inbound/<webhook_id>``, never the id itself), noted
by Flask's ``after_request``, or the one a door in front of Flask names; a path no rule matched is
``unmatched``. So the labels stay few whatever the callers send.
"""
from __future__ import annotations

import re
import secrets
import time

from flask import request

from engine.telemetry import context, metrics

ROUTE = "baton.route"
_METHODS = frozenset(("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"))
_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def install(app) -> None:
    """Put the layer around ``app.wsgi_app`` (and whatever doors already wrap it)."""

    @app.after_request
    def _note_route(response):
        rule = request.url_rule
        if rule is not None:
            request.environ[ROUTE] = rule.rule
        return response

    app.wsgi_app = RequestLayer(app.wsgi_app)


class RequestLayer:
    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        started = time.perf_counter()
        given = environ.get("HTTP_X_REQUEST_ID")
        request_id = given if given and _SANE_ID.fullmatch(given) else secrets.token_hex(8)
        answered = []

        def start(status, headers, exc_info=None):
            answered.append(status)
            headers.append(("X-Request-Id", request_id))
            return start_response(status, headers, exc_info)

        # Every id is bound here (None: unknown yet), so nothing of a thread's earlier request stays.
        with context.bound(request_id=request_id, tenant_id=None, instance_id=None, job_id=None):
            body = self.wsgi_app(environ, start)
        route = environ.get(ROUTE, "unmatched")
        method = environ.get("REQUEST_METHOD", "")
        status = answered[0][:3] if answered else "500"
        metrics.HTTP_REQUESTS.labels(route, method if method in _METHODS else "other", status).inc()
        metrics.HTTP_SECONDS.labels(route).observe(time.perf_counter() - started)
        return body

