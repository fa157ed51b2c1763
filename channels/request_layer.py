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
        # The labelled children by (route, method, status): found once, not per request. Few: the
        # routes are the app's rules, the methods seven and "other", the statuses those Baton answers.
        self._children: dict[tuple[str, str, str], tuple] = {}

    def __call__(self, environ, start_response):
        started = time.perf_counter()
        given = environ.get("HTTP_X_REQUEST_ID")
        request_id = given if given and _SANE_ID.fullmatch(given) else secrets.token_hex(8)
        answered = []

        def start(status, headers, exc_info=None):
            answered.append(status)
            headers.append(("X-Request-Id", request_id))
            return start_response(status, headers, exc_info)

        # The tenant too (None: not known yet), so what a thread's earlier request learnt never stays;
        # instance and job ids are set only by the worker loop, on its own threads.
        with context.bound(request_id=request_id, tenant_id=None):
            body = self.wsgi_app(environ, start)
        method = environ.get("REQUEST_METHOD", "")
        labels = (environ.get(ROUTE, "unmatched"), method if method in _METHODS else "other",
                  answered[0][:3] if answered else "500")
        children = self._children.get(labels)
        if children is None:
            children = self._children[labels] = (metrics.HTTP_REQUESTS.labels(*labels),
                                                 metrics.HTTP_SECONDS.labels(labels[0]))
        children[0].inc()
        children[1].observe(time.perf_counter() - started)
        return body

