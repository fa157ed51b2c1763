"""``POST /webhooks/inbound/{webhook_id}``: a call starts the latest version of the route's process."""
from __future__ import annotations

import io
import json
import logging

from flask import Blueprint, jsonify, request

from engine import webhooks
from channels.http import parse_json_object
from engine.errors import BadRequestError

bp = Blueprint("webhook", __name__)
log = logging.getLogger("baton.webhook")


def _variables(body: bytes) -> dict:
    """JSON object, form fields (strings) or nothing at all."""
    if not body.strip():
        return {}
    mimetype = request.mimetype
    if mimetype == "application/x-www-form-urlencoded":
        return {key: value for key, value in request.form.items()}
    if mimetype and mimetype != "application/json" and not mimetype.endswith("+json"):
        raise BadRequestError(f"Unsupported Content-Type '{mimetype}': send application/json "
                           "or application/x-www-form-urlencoded.")
    return parse_json_object(body)


@bp.post("/webhooks/inbound/<webhook_id>")
def inbound(webhook_id: str):
    route = webhooks.find_route(webhook_id)
    body = request.get_data(cache=True)
    webhooks.verify_signature(route, body, request.headers.get("X-Baton-Signature"))
    variables = _variables(body)
    answer = webhooks.start_from_webhook(route, variables, request.headers.get("Idempotency-Key"))
    response = jsonify(answer)
    response.status_code = 202
    return response


class LeanWebhookStart:
    """WSGI middleware in front of Flask for the common webhook call, the hottest request Baton
    serves: ``POST /webhooks/inbound/{id}`` with a JSON object body, a Content-Length within the
    limit, no Idempotency-Key, on a route without a secret. It skips Flask's request, routing and
    ORM layers (``webhooks.start_plain``: one read, two inserts, one commit) and answers exactly
    what ``inbound`` answers. Anything else, or anything unexpected on the way (a body that is
    not a JSON object, an unknown route, a database error before the commit), goes to Flask
    untouched (the body is handed on), so every error answer and edge case stays the full path's.
    """

    PREFIX = "/webhooks/inbound/"

    def __init__(self, wsgi_app, engine, max_body_bytes: int):
        self.wsgi_app = wsgi_app
        self.engine = engine
        self.max_body_bytes = max_body_bytes

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO", "").startswith(self.PREFIX):
            answer = self._start(environ)
            if answer is not None:
                body = (json.dumps(answer, separators=(",", ":")) + "\n").encode()
                start_response("202 ACCEPTED", [("Content-Type", "application/json"),
                                                ("Content-Length", str(len(body)))])
                return [body]
        return self.wsgi_app(environ, start_response)

    def _start(self, environ) -> dict | None:
        webhook_id = environ["PATH_INFO"][len(self.PREFIX):]
        if not webhook_id or "/" in webhook_id or "HTTP_IDEMPOTENCY_KEY" in environ \
                or "HTTP_TRANSFER_ENCODING" in environ:
            return None
        if environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower() != "application/json":
            return None
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return None
        if not 0 < length <= self.max_body_bytes:
            return None
        body = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(body)  # Flask reads it again if the call falls through
        if len(body) != length or not body.strip():
            return None
        try:
            variables = parse_json_object(body)
        except BadRequestError:
            return None
        try:
            return webhooks.start_plain(self.engine, webhook_id, variables)
        except Exception:  # nothing was committed: the full path tries and answers
            log.warning("lean webhook start failed; handing the call to the full path", exc_info=True)
            return None
