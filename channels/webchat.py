"""``POST /channels/webchat/{config_id}/inbound``: a customer's message, forwarded by the site's backend.

The key (``X-API-Key``) is checked first and counted against its rate limit, then the channel (an
enabled web-chat channel of the key's tenant; permission ``conversation.send``), then the body
(``chat_id`` and ``text`` required, ``user_id`` and ``username`` optional, all strings);
``engine.chat.conversations.accept`` stores the message and hands it to the chat's waiting instance
or starts the channel's process, in one transaction, and the answer is 202 with what it did.
"""
from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request

from channels.http import parse_json_object, unit_of_work
from engine import auth
from engine.chat import conversations
from engine.chat.outbox import MAX_TEXT
from engine.errors import BadRequestError, NotFoundError
from engine.store.unit_of_work import Actor
from engine.telemetry import context

bp = Blueprint("webchat", __name__)

MAX_ID = 255
_MAX_CONFIG_ID = 2**63 - 1


def _body() -> dict:
    mimetype = request.mimetype
    if mimetype and mimetype != "application/json" and not mimetype.endswith("+json"):
        raise BadRequestError(f"Unsupported Content-Type '{mimetype}': send application/json.")
    return parse_json_object(request.get_data(cache=False))


def _field(body: dict, name: str, *, required: bool, max_len: int) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise BadRequestError(f"The field '{name}' is required.")
        return None
    if not isinstance(value, str):
        raise BadRequestError(f"The field '{name}' must be a string.")
    if required and not value.strip():
        raise BadRequestError(f"The field '{name}' must not be empty.")
    if len(value) > max_len:
        raise BadRequestError(f"The field '{name}' must be at most {max_len} characters long.")
    if "\x00" in value:
        raise BadRequestError(f"The field '{name}' must not contain NUL characters.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate such as "\ud800"
        raise BadRequestError(f"The field '{name}' must be valid Unicode text.") from None
    return value


@bp.post("/channels/webchat/<int:config_id>/inbound")
def inbound(config_id: int):
    with unit_of_work("webchat") as uow:  # the key, the channel and the message: one transaction
        principal = auth.authenticate(uow, request.headers.get("X-API-Key"))
        context.set_ids(tenant_id=principal.tenant_id)
        current_app.extensions["baton"].rate_limits.check_key(principal.key_id)
        if config_id > _MAX_CONFIG_ID:
            principal.require(conversations.SEND_PERMISSION)
            raise NotFoundError(f"Unknown webchat channel {config_id}.")
        channel = conversations.inbound_channel(uow, config_id, principal, "webchat")
        uow.actor = Actor("channel", channel.name)
        body = _body()
        answer = conversations.accept(uow, channel, conversations.Arrival(
            chat_id=_field(body, "chat_id", required=True, max_len=MAX_ID),
            text=_field(body, "text", required=True, max_len=MAX_TEXT),
            user_id=_field(body, "user_id", required=False, max_len=MAX_ID),
            username=_field(body, "username", required=False, max_len=MAX_ID)))
    response = jsonify(answer)
    response.status_code = 202
    return response
