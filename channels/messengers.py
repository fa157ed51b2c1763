"""The messengers' webhooks: ``POST /webhooks/telegram``, ``POST /channels/viber/inbound``,
``POST /webhooks/whatsapp`` and Meta's ``GET /webhooks/whatsapp`` handshake.

Each call goes to its messenger's ``Messenger`` (``engine.chat.inbound_calls``): verified first (401,
nothing stored, the same answer whether the channel or the signature is wrong), then parsed and
taken item by item, and answered ``200 {"ok": true}`` as soon as its items are stored and queued: a
slow or non-2xx answer makes a messenger send the call again (a retried item is recognised and
skipped). Viber's ``conversation_started`` is answered with the channel's welcome message instead,
which Viber reads from the answer. Viber's check during ``set_webhook`` is answered 200 before anything else, since the
channel is not stored yet then.
"""
from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify, request

from channels.http import unit_of_work
from engine.chat import inbound_calls
from engine.chat.messengers.protocol import InboundCall
from engine.chat.messengers.registry import MESSENGERS
from engine.errors import HttpStatusError
from engine.store.unit_of_work import Actor

bp = Blueprint("messengers", __name__)


def _take(type_: str) -> Response:
    """Verify the call, then take each of its items in a unit of work of its own (the first also
    holds the verification's read: one transaction for a call of one item)."""
    messenger, units = MESSENGERS[type_], current_app.extensions["baton.units"]
    call = InboundCall(request.args, request.headers, lambda: request.get_data(cache=False))
    uow = units.new("messenger")
    answer = None
    try:
        for channel, item in inbound_calls.verified_items(uow, messenger, call):
            uow.actor = Actor("channel", channel.name)
            answer = inbound_calls.take(uow, messenger, channel, item) or answer
            uow.commit()
            uow = units.new("messenger")
    finally:
        uow.rollback()  # what an item raised is undone; a committed unit has nothing to undo
    return jsonify(answer or {"ok": True})


@bp.post("/webhooks/telegram")
def telegram_update():
    return _take("telegram")


@bp.post("/channels/viber/inbound")
def viber_callback():
    return _take("viber")


@bp.post("/webhooks/whatsapp")
def whatsapp_notification():
    # Meta's notifications may be up to 3 MB (a batch of messages); a 413 would be retried for days.
    request.max_content_length = current_app.config["BATON_WHATSAPP_MAX_BODY_BYTES"]
    return _take("whatsapp")


@bp.get("/webhooks/whatsapp")
def whatsapp_handshake():
    with unit_of_work("messenger") as uow:
        challenge = inbound_calls.handshake(uow, MESSENGERS["whatsapp"], request.args)
    if challenge is None:
        raise HttpStatusError(403, "forbidden", "The verification request does not match a WhatsApp channel.")
    return Response(challenge, status=200, mimetype="text/plain")
