"""``POST /webhooks/inbound/{webhook_id}``: a call starts the latest version of the route's process."""
from __future__ import annotations


from flask import Blueprint, jsonify, request

from engine import webhooks
from channels.http import parse_json_object
from engine.errors import BadRequestError

bp = Blueprint("webhook", __name__)


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
