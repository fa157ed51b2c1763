"""The calls messengers make to Baton: finding and verifying the channel of a call, then taking its
items in order. Nothing here calls a messenger or a model: an item is stored and queued, and the
caller answers 200 at once. Each messenger's part (where a call names its channel, how it proves
itself, what its body holds) is its ``Messenger``'s; the rest is the same for all.

Verification comes first and is the messenger's own (Telegram's secret token, Viber's and Meta's
HMAC of the raw body), in constant time; a call that fails it, or names no channel Baton has, gets
the same 401, so an answer never tells which channels exist. Then each item: a customer message
goes through ``conversations.accept`` like a web-chat message (its messenger id deduplicated in
the same transaction; its files get Baton's ids, ``media``); a pressed button is answered in every
case and taken only when it is on the current keyboard (``button_presses``); a delivery status
updates the delivery it names; a customer who blocked the bot or unsubscribed, or a group that
removed it, makes the chat unreachable; a chat with a new id (a Telegram supergroup) keeps its
conversation; everything else is acknowledged only, but for what the messenger reads from the answer
(Viber's welcome message).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError

from engine.chat import button_presses, conversations, media, messenger_deliveries, reachability, receipts
from engine.chat.messengers.items import (DELIVERY_STATUS, MOVED, NO_SECRET, REACHABLE, UNREACHABLE, InboundEvent,
                                          InboundItem, InboundMessage)
from engine.chat.messengers.protocol import InboundCall, Messenger
from engine.errors import ConflictError, UnauthorizedError
from engine.outbound import delivery
from engine.store.db import utcnow
from engine.store.models import Channel, Delivery
from engine.store.unit_of_work import UnitOfWork

log = logging.getLogger("baton.messengers")


def _refused() -> UnauthorizedError:
    return UnauthorizedError("The call could not be verified.")


# A channel as a call needs it: its columns (a Row), read without an ORM entity: every messenger
# message starts here, and the entity's loading cost more than the query (what conversations.accept
# reads of it, and the secrets and ids the verification and receipts need).
_COLUMNS = select(Channel.id, Channel.tenant_id, Channel.type, Channel.name, Channel.enabled, Channel.created_at,
                  Channel.webhook_secret, Channel.settings, Channel.connection, Channel.inbound_key)
_BY_KEYS = _COLUMNS.where(Channel.type == bindparam("type"),
                          Channel.inbound_key.in_(bindparam("keys", expanding=True)))
ChannelRow = Any  # a Row of _COLUMNS


# --- finding and verifying --------------------------------------------------------------------------

def verified_items(uow: UnitOfWork, messenger: Messenger, call: InboundCall) -> list[tuple[ChannelRow, InboundItem]]:
    """Verify a call (UnauthorizedError, nothing stored, when it cannot be), then its items, each with
    its channel, in order (an item of a number Baton does not know is left out: acknowledged only);
    BadRequestError when a verified call's body is not the messenger's. None to take for a call the
    messenger answers at once (Viber's check while it registers the URL: 200 only)."""
    if messenger.answers_at_once(call):
        return []
    addressed = messenger.addressed(call)
    channels = _channels(uow, messenger.type, addressed.keys)
    if not _verified(messenger, call, channels):
        if messenger.secret_shared_by_accounts and _verified_by_any(uow, messenger, call):
            return []   # signed, but for a number or a field no channel of Baton's owns: 200, ignored
        raise _refused()
    items = addressed.items if addressed.items is not None else messenger.parse(call.body)
    found = [(channels.get(messenger.key_of(item, addressed.keys)), item) for item in items]
    return [(channel, item) for channel, item in found if channel is not None]


def _channels(uow: UnitOfWork, type_: str, keys: tuple[str, ...]) -> dict[str, ChannelRow]:
    """The channels of a type with these inbound keys, by key."""
    if not keys:
        return {}
    rows = uow.run(_BY_KEYS, {"type": type_, "keys": list(keys)}).all()
    return {row.inbound_key: row for row in rows}


def _verified(messenger: Messenger, call: InboundCall, channels: Mapping[str, ChannelRow]) -> bool:
    """Whether the call proves it knows the secret of every channel it names; a call naming none is
    compared against a secret no channel has, so that it costs what a wrong secret does."""
    secrets = [messenger.verifying_secret(channel.settings or {}, channel.webhook_secret)
               for channel in channels.values()] or [None]
    checks = [messenger.verify(call, secret or NO_SECRET) for secret in secrets]
    return bool(channels) and all(checks)


_SETTINGS_OF_TYPE = select(Channel.settings, Channel.webhook_secret).where(Channel.type == bindparam("type"))


def _verified_by_any(uow: UnitOfWork, messenger: Messenger, call: InboundCall) -> bool:
    """Whether the call proves it knows the secret of any channel of the messenger (each distinct
    secret compared once, all of them always)."""
    secrets = {messenger.verifying_secret(row.settings or {}, row.webhook_secret)
               for row in uow.run(_SETTINGS_OF_TYPE, {"type": messenger.type})}
    checks = [messenger.verify(call, secret) for secret in secrets if secret]
    return any(checks)


def handshake(uow: UnitOfWork, messenger: Messenger, query: Mapping[str, str]) -> str | None:
    """A GET check of the webhook URL (Meta's): the answer when it matches one of the messenger's
    channels, else None."""
    settings = [settings or {} for settings in uow.execute(
        select(Channel.settings).where(Channel.type == messenger.type)).scalars()]
    return messenger.handshake(query, settings)


# --- taking the items -------------------------------------------------------------------------------

def take(uow: UnitOfWork, messenger: Messenger, channel: ChannelRow, item: InboundItem) -> dict[str, Any] | None:
    """Take one item in the unit of work (each item has its own: a retried call finds the ones taken
    before and skips them); what to answer the call with when the messenger reads the answer
    (``Messenger.answer_body``: Viber's welcome message), else None."""
    if isinstance(item, InboundMessage):
        _message(uow, messenger, channel, item)
        return None
    _event(uow, messenger, channel, item)
    return messenger.answer_body(item, channel.settings or {}) if channel.enabled else None


def _message(uow: UnitOfWork, messenger: Messenger, channel: ChannelRow, item: InboundMessage) -> None:
    if not channel.enabled:      # disabled: acknowledged and dropped (its webhook is being removed)
        return
    if item.callback_query_id is not None:
        _press(uow, messenger, channel, item)
    else:
        _accept(uow, messenger, channel, item, _receipt_id(messenger, channel, item.dedup_id))


def _press(uow: UnitOfWork, messenger: Messenger, channel: ChannelRow, item: InboundMessage) -> None:
    """A pressed button (Telegram's callback_query): answered in every case, taken only when it is on
    the conversation's current keyboard (``button_presses``), once however often it is sent."""
    if not _first_receipt(uow, channel, _receipt_id(messenger, channel, item.dedup_id), "message"):
        return
    refusal = button_presses.refusal(uow, channel.id, item.chat_id, item.pressed_on)
    if refusal is None:
        _accept(uow, messenger, channel, item, None)
    answer = messenger.button_answer(item, refusal)
    if answer is not None:
        messenger_deliveries.queue_button_answer(uow, channel.tenant_id, channel.id, messenger, answer,
                                                 item.callback_query_id)


def _accept(uow: UnitOfWork, messenger: Messenger, channel: ChannelRow, item: InboundMessage,
            dedup_id: str | None) -> None:
    channel_id, tenant_id = channel.id, channel.tenant_id
    item = replace(item, attachments=media.with_ids(item.attachments))
    variables = item.variables()
    read_receipt = messenger.read_receipt(item, channel.settings or {})

    def also(uow: UnitOfWork, conversation) -> None:
        reachability.clear(uow, channel_id, item.chat_id)       # writing again: the customer is back
        media.record(uow, tenant_id, channel_id, conversation.id, item.attachments)
        if read_receipt is not None:  # the process took it (a message no process takes is not marked)
            messenger_deliveries.queue_read_receipt(uow, tenant_id, channel_id, messenger, read_receipt,
                                                    item.dedup_id)

    # In a group the chat is the group and the sender is who wrote (external_user_id).
    arrival = conversations.Arrival(
        chat_id=item.chat_id, text=item.text, user_id=item.user_id, username=item.display_name,
        extras={key: variables[key] for key in ("message_type", "attachments", "button_id", "context")
                if key in variables},
        dedup_id=dedup_id, also=also)
    try:
        with uow.savepoint():
            conversations.accept(uow, channel, arrival)
    except ConflictError as error:   # no process bound: answering an error would only make it retry
        _note_error(uow, channel_id, error.message)


def _first_receipt(uow: UnitOfWork, channel: ChannelRow, dedup_id: str | None, kind: str) -> bool:
    """Record that an item was taken; False when it was before (a retried call)."""
    if dedup_id is None:
        return True
    if receipts.taken(uow, channel.id, dedup_id):
        return False
    try:
        with uow.savepoint():
            receipts.take(uow, channel.tenant_id, channel.id, dedup_id, kind)
    except IntegrityError:       # the same item, taken by a concurrent retry of the call
        return False
    return True


def _event(uow: UnitOfWork, messenger: Messenger, channel: ChannelRow, event: InboundEvent) -> None:
    if event.kind not in (DELIVERY_STATUS, UNREACHABLE, REACHABLE, MOVED):
        return                       # acknowledged only: edits, service messages, webhook checks, ...
    dedup_id = _receipt_id(messenger, channel, event.dedup_id) if event.dedup_id else None
    if not _first_receipt(uow, channel, dedup_id, event.event):
        return
    if event.kind == DELIVERY_STATUS and event.message_id and event.status in delivery.RECEIPTS:
        was_sent = event.status == "failed" and _sent_reply(uow, channel.id, event.message_id)
        delivery.record_receipt(uow, channel.id, event.message_id, event.status, event.reason)
        if was_sent:   # accepted, then reported failed (WhatsApp's 131047 often comes so): dead now
            messenger_deliveries.tell_process(
                uow, channel.id, was_sent, f"{messenger.name} reported it failed: {event.reason or 'no reason given'}",
                messenger.failure_of(event.error_code))
    elif event.kind == UNREACHABLE and event.chat_id:
        reachability.mark(uow, channel.tenant_id, channel.id, event.chat_id, event.reason or event.event)
        # Replies already waiting for a retry die now rather than at their next attempt.
        delivery.wake_key(uow, channel.tenant_id, messenger_deliveries.chat_key(channel.id, event.chat_id))
    elif event.kind == REACHABLE and event.chat_id:
        reachability.clear(uow, channel.id, event.chat_id)
    elif event.kind == MOVED and event.chat_id and event.new_chat_id:
        conversations.move_chat(uow, channel.id, event.chat_id, event.new_chat_id)


_SENT_REPLY = select(Delivery.ordering_key).where(
    Delivery.channel_id == bindparam("channel_id"), Delivery.external_id == bindparam("external_id"),
    Delivery.status == delivery.SENT).order_by(Delivery.id.desc()).limit(1)


def _sent_reply(uow: UnitOfWork, channel_id: int, external_id: str) -> str | None:
    """The chat of the sent reply the messenger knows as ``external_id`` (None: no such reply)."""
    key = uow.run(_SENT_REPLY, {"channel_id": channel_id, "external_id": external_id}).scalar()
    return None if key is None else messenger_deliveries.chat_of_key(channel_id, key)


def _receipt_id(messenger: Messenger, channel: ChannelRow, messenger_id: str | None) -> str | None:
    """The id an item's receipt is kept under on its channel (``Messenger.receipt_id``)."""
    if messenger_id is None:
        return None
    return messenger.receipt_id(messenger_id, channel.connection or {})


def _note_error(uow: UnitOfWork, channel_id: int, message: str) -> None:
    """A message that could not be taken is the channel's last error (``channel.get``)."""
    log.warning("channel %s: a message could not be taken: %s", channel_id, message)
    uow.execute(update(Channel).where(Channel.id == channel_id).values(last_error=message, last_error_at=utcnow()))
