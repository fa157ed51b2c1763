"""What messengers send Baton: finding and verifying the channel of a call, then taking its items in
order. Nothing here calls a messenger or a model: an item is stored and queued, and the caller
answers 200 at once.

Verification comes first and is the messenger's own (Telegram's secret token, Viber's and Meta's
HMAC of the raw body), in constant time; a call that fails it, or names no channel Baton has, gets
the same 401, so an answer never tells which channels exist. Then each item: a customer message
goes through ``conversations.accept`` like a web-chat message (its messenger id deduplicated in
the same transaction); a delivery status updates the delivery it names; a customer who blocked the
bot or unsubscribed makes the chat unreachable; everything else is acknowledged only.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError

from engine.chat import conversations, messenger_calls, reachability, receipts
from engine.chat.messengers import telegram, viber, whatsapp
from engine.chat.messengers.inbound import (DELIVERY_STATUS, REACHABLE, UNREACHABLE, InboundEvent, InboundItem,
                                            InboundMessage, header)
from engine.errors import BadRequestError, ConflictError, UnauthorizedError
from engine.outbound import delivery
from engine.store.db import db, utcnow
from engine.store.models import Channel

log = logging.getLogger("baton.messengers")

# Compared against when no channel matched, so that an unknown channel costs what a wrong secret does.
_NO_SECRET = "baton-no-channel-" + "0" * 48


def _refused() -> UnauthorizedError:
    return UnauthorizedError("The call could not be verified.")


# A channel as a call needs it: its columns (a Row), read without an ORM entity: every messenger
# message starts here, and the entity's loading cost more than the query (what conversations.accept
# reads of it, and the secrets and ids the verification and receipts need).
_COLUMNS = select(Channel.id, Channel.tenant_id, Channel.type, Channel.name, Channel.enabled, Channel.created_at,
                  Channel.webhook_secret, Channel.settings, Channel.connection, Channel.inbound_key)
_BY_KEY = _COLUMNS.where(Channel.type == bindparam("type"), Channel.inbound_key == bindparam("key"))
ChannelRow = Any  # a Row of _COLUMNS


def _by_key(type_: str, key: str | None) -> ChannelRow | None:
    if not key:
        return None
    return db.session.connection().execute(_BY_KEY, {"type": type_, "key": key}).first()


# --- finding and verifying --------------------------------------------------------------------------

def telegram_channel(headers: Mapping[str, str]) -> ChannelRow:
    """The channel whose secret token the call carries (its key finds it, the whole is compared)."""
    channel = _by_key("telegram", telegram.secret_token_key(headers))
    verified = telegram.verify(headers, channel.webhook_secret if channel is not None else _NO_SECRET)
    if channel is None or not verified:
        raise _refused()
    return channel


def viber_channel(query: Mapping[str, str], headers: Mapping[str, str], body: bytes) -> ChannelRow:
    """The channel the URL's ``?channel=`` names, if the body is signed with its auth token."""
    channel = _by_key("viber", viber.channel_key(query))
    token = (channel.settings or {}).get("auth_token") if channel is not None else None
    verified = viber.verify(headers, body, token or _NO_SECRET)
    if channel is None or not verified:
        raise _refused()
    return channel


def whatsapp_items(headers: Mapping[str, str], body: bytes) -> list[tuple[ChannelRow | None, InboundItem]]:
    """Every item of a notification with its channel (found by ``metadata.phone_number_id``), once the
    body's signature checks out with the app secret of every channel it names. Items of numbers
    Baton does not know come with None (acknowledged only)."""
    if header(headers, whatsapp.SIGNATURE_HEADER) is None:
        raise _refused()
    try:
        items = whatsapp.parse(body)
    except BadRequestError:
        raise _refused() from None         # no channel to verify it with: it cannot be verified
    accounts = {item.account_id for item in items if item.account_id}
    channels = {channel.inbound_key: channel for channel in db.session.connection().execute(
        _COLUMNS.where(Channel.type == "whatsapp", Channel.inbound_key.in_(accounts))).all()}
    checks = [whatsapp.verify(headers, body, (channel.settings or {}).get("app_secret") or _NO_SECRET)
              for channel in channels.values()]
    if not channels or not all(checks):
        raise _refused()
    return [(channels.get(item.account_id), item) for item in items]


def whatsapp_handshake(query: Mapping[str, str]) -> str | None:
    """Meta's ``GET`` check: the challenge to echo when it carries a WhatsApp channel's verify token."""
    tokens = [(settings or {}).get("verify_token") or _NO_SECRET for settings in db.session.execute(
        select(Channel.settings).where(Channel.type == "whatsapp")).scalars()]
    db.session.rollback()
    return whatsapp.handshake(query, tokens)


# --- taking the items -------------------------------------------------------------------------------

def receive(channel: ChannelRow, items: list[InboundItem]) -> None:
    """Take a verified call's items in order, each in its own transaction (a retried call finds the
    ones taken before and skips them)."""
    for item in items:
        if isinstance(item, InboundMessage):
            _message(channel, item)
        else:
            _event(channel, item)


def _message(channel: ChannelRow, item: InboundMessage) -> None:
    if not channel.enabled:      # disabled: acknowledged and dropped (its webhook is being removed)
        db.session.rollback()
        return
    channel_id, tenant_id = channel.id, channel.tenant_id
    variables = item.variables()

    def also(_conversation) -> None:
        reachability.clear(channel_id, item.chat_id)       # writing again: the customer is back
        if item.callback_query_id:
            messenger_calls.queue_button_answer(tenant_id, channel_id, item.callback_query_id)

    arrival = conversations.Arrival(
        chat_id=item.chat_id, text=item.text, user_id=item.chat_id, username=item.display_name,
        extras={key: variables[key] for key in ("message_type", "attachments", "button_id")},
        dedup_id=_dedup_id(channel, item.dedup_id), also=also)
    try:
        conversations.accept(channel, arrival)
    except ConflictError as error:   # no process bound: answering an error would only make it retry
        db.session.rollback()
        _note_error(channel_id, error.message)


def _event(channel: ChannelRow, event: InboundEvent) -> None:
    if event.kind not in (DELIVERY_STATUS, UNREACHABLE, REACHABLE):
        db.session.rollback()        # acknowledged only: edits, webhook checks, reactions, ...
        return
    dedup_id = _dedup_id(channel, event.dedup_id) if event.dedup_id else None
    try:
        if dedup_id is not None:
            if receipts.taken(channel.id, dedup_id):
                db.session.rollback()
                return
            receipts.take(channel.tenant_id, channel.id, dedup_id, event.event)
        if event.kind == DELIVERY_STATUS and event.message_id and event.status in delivery.RECEIPTS:
            delivery.record_receipt(channel.id, event.message_id, event.status, event.reason)
        elif event.kind == UNREACHABLE and event.chat_id:
            reachability.mark(channel.tenant_id, channel.id, event.chat_id, event.reason or event.event)
            # Replies already waiting for a retry die now rather than at their next attempt.
            delivery.wake_key(channel.tenant_id, messenger_calls.chat_key(channel.id, event.chat_id))
        elif event.kind == REACHABLE and event.chat_id:
            reachability.clear(channel.id, event.chat_id)
        db.session.commit()
    except IntegrityError:           # the same event, taken by a concurrent retry of the call
        db.session.rollback()


def _dedup_id(channel: ChannelRow, messenger_id: str | None) -> str | None:
    """The receipt id of an item: Telegram's ``update_id`` counts per bot, so it goes with the bot's
    id (a channel given another bot's token must not take its update 17 for the old bot's)."""
    if messenger_id is None:
        return None
    if channel.type == "telegram":
        return f"{(channel.connection or {}).get('bot_id')}:{messenger_id}"
    return messenger_id


def _note_error(channel_id: int, message: str) -> None:
    """A message that could not be taken is the channel's last error (``channel.get``)."""
    log.warning("channel %s: a message could not be taken: %s", channel_id, message)
    db.session.execute(update(Channel).where(Channel.id == channel_id)
                       .values(last_error=message, last_error_at=utcnow()))
    db.session.commit()
