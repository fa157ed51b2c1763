"""The messengers' webhooks: ``POST /webhooks/telegram``, ``POST /channels/viber/inbound``,
``POST /webhooks/whatsapp`` and Meta's ``GET /webhooks/whatsapp`` handshake.

Each call is verified first (``engine.chat.messenger_inbound``: 401, nothing stored, the same answer
whether the channel or the signature is wrong), then parsed and taken item by item, and answered
``200 {"ok": true}`` as soon as its items are stored and queued: a slow or non-2xx answer makes a
messenger send the call again (a retried item is recognised and skipped). Viber's check during
``set_webhook`` is answered 200 before anything else, since the channel is not stored yet then.
"""
from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from engine.chat import messenger_inbound
from engine.chat.messengers import telegram, viber
from engine.errors import HttpStatusError

bp = Blueprint("messengers", __name__)


def _taken() -> Response:
    return jsonify({"ok": True})


def _body() -> bytes:
    return request.get_data(cache=False)


@bp.post("/webhooks/telegram")
def telegram_update():
    channel = messenger_inbound.telegram_channel(request.headers)
    messenger_inbound.receive(channel, telegram.parse(_body()))
    return _taken()


@bp.post("/channels/viber/inbound")
def viber_callback():
    body = _body()
    if viber.is_webhook_check(body):
        return _taken()                # Viber registers the URL only if this answers 200
    channel = messenger_inbound.viber_channel(request.args, request.headers, body)
    messenger_inbound.receive(channel, viber.parse(body))
    return _taken()


@bp.post("/webhooks/whatsapp")
def whatsapp_notification():
    # One notification may carry several numbers' items: each goes to its number's channel, in order.
    for channel, item in messenger_inbound.whatsapp_items(request.headers, _body()):
        if channel is not None:
            messenger_inbound.receive(channel, [item])
    return _taken()


@bp.get("/webhooks/whatsapp")
def whatsapp_handshake():
    challenge = messenger_inbound.whatsapp_handshake(request.args)
    if challenge is None:
        raise HttpStatusError(403, "forbidden", "The verification request does not match a WhatsApp channel.")
    return Response(challenge, status=200, mimetype="text/plain")
