"""Conversations as callers see them: a customer message arriving on a channel, operator replies,
the lists of active conversations and of a conversation's messages.

Every channel type arrives through one ``accept`` (web-chat's endpoint, each messenger's webhook):
an ``Arrival`` says what the customer sent; a messenger's adds what a text does not say (message
type, attachments, a pressed button) and its own id of the message, which is recorded in the same
transaction (``receipts``) so that a retried call is acknowledged and ignored.

An arriving message (``accept``) is stored and acted on in ONE transaction: with an active
conversation for its chat, it goes to the conversation's open AI chat step (an ``ai_turn`` job,
``engine.ai_chat``), else a ``chat_message`` job of the conversation's instance carries it to the
runner (which hands it to a waiting AI step that has just opened, a ``chat_message`` catch event
or receive task, or leaves it only stored); without one, the latest definition bound to the
channel starts and the conversation opens with it. The conversation row is locked first, so the messages of one chat get their ids,
their jobs and their commits in one order, and the instance's jobs run in that order.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from engine import jobs
from engine.chat import ai_dialogs, channel_configs, messenger_deliveries, outbox, receipts
from engine.chat.messengers.registry import MESSENGERS
from engine.jobs.kinds import CHAT_MESSAGE, START
from engine.errors import ConflictError, ForbiddenError, InvalidParamsError, NotFoundError
from engine.store import history, writes
from engine.store.db import iso, utcnow
from engine.store.models import Channel, Conversation, Delivery, Instance, Message
from engine.store.paging import page_of
from engine.store.unit_of_work import UnitOfWork

log = logging.getLogger("baton.conversations")

SEND_PERMISSION = "conversation.send"
DELIVERY_STATES = ("queued", "sent", "dead")


_INBOUND_CHANNEL = select(Channel.id, Channel.tenant_id, Channel.type, Channel.name, Channel.enabled,
                          Channel.created_at).where(Channel.id == bindparam("id"))


def inbound_channel(uow: UnitOfWork, config_id: int, principal, type_: str):
    """The enabled channel a message is posted to, if the caller's key may post to it (its columns
    ``id, tenant_id, type, name, enabled, created_at``: what ``accept`` needs, read without an ORM entity)."""
    principal.require(SEND_PERMISSION)
    channel = uow.run(_INBOUND_CHANNEL, {"id": config_id}).first()
    if channel is None or channel.type != type_:
        raise NotFoundError(f"Unknown {type_} channel {config_id}.")
    if channel.tenant_id != principal.tenant_id:
        raise ForbiddenError(SEND_PERMISSION, "The API key belongs to another tenant than this channel.")
    if not channel.enabled:
        raise NotFoundError(f"Channel {config_id} is disabled.")
    return channel


@dataclass(frozen=True)
class Arrival:
    """A customer's message as any channel delivers it.

    ``extras`` are variables besides the common ones (a messenger's ``message_type``, ``attachments``,
    ``button_id``), also kept as the message's ``content``; ``dedup_id`` is the channel's own id of
    the message (None: web-chat has none); ``also`` runs in the same transaction once the message is
    stored (a messenger's acknowledgement to queue, say), with the unit of work and the conversation."""

    chat_id: str
    text: str
    user_id: str | None = None
    username: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    dedup_id: str | None = None
    also: Callable[[UnitOfWork, Conversation], None] | None = None


DUPLICATE = {"accepted": False, "duplicate": True}


def accept(uow: UnitOfWork, channel, arrival: Arrival) -> dict[str, Any]:
    """Store a customer's message and route it, or start the channel's process with it, in the
    unit of work. A message whose ``dedup_id`` was taken before answers ``DUPLICATE`` and changes
    nothing. ``channel``: a Channel, or a row of its columns (``inbound_channel``)."""
    if arrival.dedup_id is not None:
        if receipts.taken(uow, channel.id, arrival.dedup_id):
            return dict(DUPLICATE)
        try:
            # The same messenger message arriving twice at once: the receipt's unique key refuses
            # the second once the first commits.
            with uow.savepoint():
                receipts.take(uow, channel.tenant_id, channel.id, arrival.dedup_id, "message")
        except IntegrityError:
            return dict(DUPLICATE)
    return _route_or_start(uow, channel, arrival)


# The accept's statements, Core on the session's connection (the ORM's unit of work and identity
# map cost more than these few rows; the rows written are the same: tests/unit/engine/chat/test_accept.py).
_conversations, _messages, _instances = Conversation.__table__, Message.__table__, Instance.__table__
_ACTIVE = (select(_conversations.c.id, _conversations.c.instance_id, _conversations.c.external_user_id,
                  _conversations.c.external_username, _instances.c.status)
           .join(_instances, _instances.c.id == _conversations.c.instance_id)
           .where(_conversations.c.channel_id == bindparam("channel_id"),
                  _conversations.c.chat_id == bindparam("chat_id"), _conversations.c.status == "active")
           .with_for_update(of=_conversations))
_CLOSE = (update(_conversations).where(_conversations.c.id == bindparam("conversation_id"))
          .values(status="closed", closed_at=bindparam("now")))
_TOUCH = (update(_conversations).where(_conversations.c.id == bindparam("conversation_id"))
          .values(last_message_at=bindparam("now"), customer_wrote_at=bindparam("now"),
                  external_user_id=bindparam("user_id"),
                  external_username=bindparam("username")))
_OPEN = (insert(_conversations).values(
    tenant_id=bindparam("tenant_id"), channel_id=bindparam("channel_id"), chat_id=bindparam("chat_id"),
    status="active", external_user_id=bindparam("user_id"), external_username=bindparam("username"),
    started_at=bindparam("now"), last_message_at=bindparam("now"), customer_wrote_at=bindparam("now"))
    .returning(_conversations.c.id))
_BIND = (update(_conversations).where(_conversations.c.id == bindparam("conversation_id"))
         .values(instance_id=bindparam("instance_id")))
_MESSAGE = (insert(_messages).values(
    tenant_id=bindparam("tenant_id"), conversation_id=bindparam("conversation_id"), direction="in",
    author="customer", text=bindparam("text"), created_at=bindparam("now"), content=bindparam("content"))
    .returning(_messages.c.id))


@dataclass(frozen=True)
class _Chat:
    """The conversation a message joins, as the rest of the accept needs it."""

    id: int
    instance_id: int
    external_user_id: str | None
    external_username: str | None
    chat_id: str


# How often a message looks for its chat's conversation again after another message opened one
# first: each retry follows a winner's commit, so only a chat whose conversations open and close
# as fast as its messages arrive needs more than one or two.
OPEN_ATTEMPTS = 20


def _route_or_start(uow: UnitOfWork, channel, arrival: Arrival) -> dict[str, Any]:
    now, text = utcnow(), arrival.text
    connection = uow.connection()
    for _ in range(OPEN_ATTEMPTS):
        conversation = _active_conversation(connection, channel, arrival, now)
        if conversation is not None:
            opened = False
            break
        try:
            # In a savepoint: the losers of a race to open the chat's conversation (PostgreSQL's
            # unique index refuses them once the winner commits) look again and join the winner's.
            with uow.savepoint():
                conversation = _open(uow, channel, arrival, now)
            opened = True
            break
        except IntegrityError:
            continue
    else:
        raise ConflictError(f"The chat '{arrival.chat_id}' opened and closed conversations faster than its "
                            "messages arrived; send the message again.")
    message_id = connection.execute(_MESSAGE, {
        "tenant_id": channel.tenant_id, "conversation_id": conversation.id, "text": text, "now": now,
        "content": _content(arrival.extras)}).scalar_one()
    if arrival.also is not None:
        arrival.also(uow, conversation)
    # Linked, not copied: the text stays in conversation.messages.
    history.record(uow, tenant_id=channel.tenant_id, instance_id=conversation.instance_id, kind="message_received",
                   detail={"binding_id": conversation.id, "message_id": message_id, "channel": channel.type})
    if not opened:
        variables = _variables(channel, conversation, arrival)
        if not ai_dialogs.route_message(uow, channel.tenant_id, conversation.id, message_id, variables):
            jobs.enqueue(uow, channel.tenant_id, CHAT_MESSAGE, instance_id=conversation.instance_id,
                         payload={"variables": variables})
    return {"accepted": True, "binding_id": conversation.id, "instance_id": conversation.instance_id,
            "message_id": message_id}


def _active_conversation(connection, channel, arrival: Arrival, now) -> _Chat | None:
    """The chat's active conversation, locked and touched by this message; one whose instance ended
    without closing it (should not happen) is closed here and not returned."""
    found = connection.execute(_ACTIVE, {"channel_id": channel.id, "chat_id": arrival.chat_id}).first()
    if found is None:
        return None
    if found.status != "running":
        connection.execute(_CLOSE, {"conversation_id": found.id, "now": now})
        return None
    conversation = _Chat(found.id, found.instance_id, arrival.user_id or found.external_user_id,
                         arrival.username or found.external_username, arrival.chat_id)
    connection.execute(_TOUCH, {"conversation_id": conversation.id, "now": now,
                                "user_id": conversation.external_user_id,
                                "username": conversation.external_username})
    return conversation


def _open(uow: UnitOfWork, channel, arrival: Arrival, now) -> _Chat:
    """Start the channel's process for a new chat; the conversation opens with the instance."""
    connection = uow.connection()
    definition = channel_configs.bound_definition(uow, channel)
    if definition is None:
        raise ConflictError(f"No process is bound to channel {channel.id}: deploy one whose start event has "
                            f"trigger = {channel.type} and channel = {channel.id} (or '{channel.name}').")
    # The partial unique index refuses a second active conversation of the chat here.
    conversation_id = connection.execute(_OPEN, {
        "tenant_id": channel.tenant_id, "channel_id": channel.id, "chat_id": arrival.chat_id,
        "user_id": arrival.user_id, "username": arrival.username, "now": now}).scalar_one()
    conversation = _Chat(conversation_id, 0, arrival.user_id, arrival.username, arrival.chat_id)
    instance_id = writes.create_instance(
        uow, channel.tenant_id, definition.id, _variables(channel, conversation, arrival),
        START, {"start_event": channel_configs.bound_start_event(definition, channel)})
    connection.execute(_BIND, {"conversation_id": conversation_id, "instance_id": instance_id})
    return _Chat(conversation_id, instance_id, arrival.user_id, arrival.username, arrival.chat_id)


def _content(extras: dict[str, Any]) -> dict[str, Any] | None:
    """What a message's text does not say, to keep with it: nothing for plain text."""
    kept = {key: value for key, value in extras.items() if value not in (None, [], "text")}
    return kept or None


def _variables(channel, conversation: _Chat, arrival: Arrival) -> dict[str, Any]:
    return {"message_text": arrival.text, "external_username": conversation.external_username,
            "external_user_id": conversation.external_user_id, "channel": channel.type,
            "chat_id": conversation.chat_id, "binding_id": conversation.id, **arrival.extras}


def move_chat(uow: UnitOfWork, channel_id: int, chat_id: str, new_chat_id: str) -> None:
    """The chat has a new id (a Telegram group that became a supergroup): its active conversation
    follows it, so the process goes on talking to the same people. Left where it is when the new
    chat already has a conversation of its own."""
    try:
        with uow.savepoint():
            uow.execute(update(Conversation).where(
                Conversation.channel_id == channel_id, Conversation.chat_id == chat_id,
                Conversation.status == "active").values(chat_id=new_chat_id)
                .execution_options(synchronize_session=False))
    except IntegrityError:
        log.warning("channel %s: chat %s moved to %s, which has a conversation already", channel_id, chat_id,
                    new_chat_id)


def _get(uow: UnitOfWork, tenant_id: int, binding_id: int, *, lock: bool = False) -> Conversation:
    query = select(Conversation).where(Conversation.tenant_id == tenant_id, Conversation.id == binding_id)
    conversation = uow.execute(query.with_for_update() if lock else query).scalar_one_or_none()
    if conversation is None:
        raise NotFoundError(f"Conversation {binding_id} not found.")
    return conversation


ASSIGN_PERMISSION = "conversation.assign"


def send(uow: UnitOfWork, tenant_id: int, binding_id: int, text: str | None, principal=None,
         template: dict[str, Any] | None = None) -> dict[str, Any]:
    """An operator's reply: stored and queued for delivery in the unit of work. A conversation another
    user holds is a ConflictError unless ``principal`` (the calling key) may assign conversations.
    ``template`` (WhatsApp): sent instead of ``text`` when the window is closed; alone, it is the reply."""
    if text is None and template is None:
        raise InvalidParamsError("conversation.send needs a 'text', a 'template' (WhatsApp), or both.",
                                 data={"param": "text"})
    conversation = _get(uow, tenant_id, binding_id, lock=True)
    if template is not None:
        template = messenger_deliveries.checked_template(template)
        channel_type = uow.run(select(Channel.type).where(Channel.id == conversation.channel_id)).scalar()
        if getattr(MESSENGERS.get(channel_type), "window_s", None) is None:
            raise InvalidParamsError(f"Conversation {binding_id} is on a {channel_type} channel: message templates "
                                     "are WhatsApp's; send a text.", data={"param": "template"})
    if conversation.status != "active":
        raise ConflictError(f"Conversation {binding_id} is {conversation.status}; it takes no more messages.")
    if principal is not None and conversation.assignee is not None and conversation.assignee != principal.user \
            and not principal.allows(ASSIGN_PERMISSION):
        raise ConflictError(f"Conversation {binding_id} is held by '{conversation.assignee}': only they, or a key "
                            f"with '{ASSIGN_PERMISSION}', may answer it.")
    message_id = outbox.record_outgoing(uow, outbox.ActiveConversation(
        conversation.id, conversation.tenant_id, conversation.channel_id, conversation.chat_id), text, "operator",
        template=template)
    return {"binding_id": binding_id, "message_id": message_id, "status": "queued"}


ANYONE = object()  # ``assignee`` not given (None: conversations nobody holds)


def list_conversations(uow: UnitOfWork, tenant_id: int, *, channel_type: str | None, page: int, per_page: int,
                       assignee: Any = ANYONE, candidate_group: str | None = None) -> dict[str, Any]:
    """The tenant's active conversations, newest first; ``assignee``: held by that user (None: by nobody)."""
    conditions = [Conversation.tenant_id == tenant_id, Conversation.status == "active"]
    if channel_type is not None:
        conditions.append(Channel.type == channel_type)
    if assignee is not ANYONE:
        conditions.append(Conversation.assignee.is_(None) if assignee is None else Conversation.assignee == assignee)
    if candidate_group is not None:
        conditions.append(Conversation.candidate_group == candidate_group)
    base = select(Conversation, Channel.type).join(Channel, Channel.id == Conversation.channel_id).where(*conditions)
    return page_of(uow, base, Conversation.id, page=page, per_page=per_page, item=lambda row: {
        "binding_id": row[0].id, "channel": row[1], "config_id": row[0].channel_id, "chat_id": row[0].chat_id,
        "external_user_id": row[0].external_user_id, "external_username": row[0].external_username,
        "instance_id": row[0].instance_id, "started_at": iso(row[0].started_at),
        "last_message_at": iso(row[0].last_message_at), "assignee": row[0].assignee,
        "candidate_group": row[0].candidate_group, "customer_wrote_at": iso(row[0].customer_wrote_at),
        "window_closes_at": iso(window_closes_at(row[1], row[0].customer_wrote_at))})


def window_closes_at(channel_type: str, customer_wrote_at):
    """When the messenger stops taking free-form replies (WhatsApp: 24 hours after the customer's
    last message); None for a channel without such a window, or a customer who never wrote."""
    messenger = MESSENGERS.get(channel_type)
    window_s = getattr(messenger, "window_s", None)
    if window_s is None or customer_wrote_at is None:
        return None
    return customer_wrote_at + timedelta(seconds=window_s)


def list_messages(uow: UnitOfWork, tenant_id: int, binding_id: int, *, page: int, per_page: int) -> dict[str, Any]:
    """A conversation's messages (active or closed), newest first, each with its delivery's state;
    the page also names the conversation's channel and chat. A messenger message that is not plain
    text carries ``message_type``, ``attachments`` and ``button_id``; an answer with buttons ``buttons``."""
    conversation = _get(uow, tenant_id, binding_id)
    channel_type = uow.execute(select(Channel.type).where(Channel.id == conversation.channel_id)).scalar()
    query = (select(Message, Delivery.status, Delivery.receipt).outerjoin(Delivery, Delivery.id == Message.delivery_id)
             .where(Message.conversation_id == conversation.id))
    listed = page_of(uow, query, Message.id, page=page, per_page=per_page, item=lambda row: {
        "message_id": row[0].id, "direction": row[0].direction, "text": row[0].text, "author": row[0].author,
        "created_at": iso(row[0].created_at), "delivery": _delivery_state(row[0], row[1]),
        **({"receipt": row[2]} if row[2] else {}), **(row[0].content or {})})
    return {**listed, "binding_id": conversation.id, "channel": channel_type, "config_id": conversation.channel_id,
            "chat_id": conversation.chat_id}


def _delivery_state(message: Message, status: str | None) -> str | None:
    """``queued`` until sent or dead (a delivery being retried is still queued); null for no delivery."""
    if message.delivery_id is None:
        return None
    return status if status in DELIVERY_STATES else "queued"
