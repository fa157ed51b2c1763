"""The chat tables: channels, conversations and their messages, AI dialogs, and what messengers
tell Baton besides messages (inbound receipts for deduplication, customers who cannot be reached)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from engine.store.db import BigId, db, utcnow
from engine.store.sealing import SealedJSON, SealedText


class Channel(db.Model):
    """A configured connection: web-chat or a messenger. Secrets are never returned.

    Web-chat: ``webhook_url`` / ``webhook_secret`` are where answers are POSTed and how they are
    signed. Messengers: ``settings`` holds the credentials (§4.4), ``webhook_url`` the URL registered
    with the messenger, ``webhook_secret`` Telegram's secret token, ``inbound_key`` what finds the
    channel from an inbound call (the secret token's key, Viber's ``?channel=``, WhatsApp's
    ``phone_number_id``), ``connection`` what the credential check learnt (bot id and name).
    """

    __tablename__ = "channels"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),
                      UniqueConstraint("type", "inbound_key", name="uq_channels_type_inbound_key"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    type: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    webhook_url: Mapped[str | None] = mapped_column(String(2000))
    webhook_secret: Mapped[str | None] = mapped_column(SealedText)   # sealed at rest (engine.store.sealing)
    settings: Mapped[dict[str, Any]] = mapped_column(SealedJSON, default=dict)
    enabled: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    inbound_key: Mapped[str | None] = mapped_column(String(64))
    connection: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    registered_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    last_error_at: Mapped[datetime | None]


class Conversation(db.Model):
    """One customer (a chat_id on a channel) talking with one running instance: the binding."""

    __tablename__ = "conversations"
    __table_args__ = (
        # At most one active conversation per (channel, chat_id).
        Index("ux_conversations_active_chat", "channel_id", "chat_id", unique=True,
              sqlite_where=text("status = 'active'"), postgresql_where=text("status = 'active'")),
        Index("ix_conversations_tenant_status_id", "tenant_id", "status", "id"),
        Index("ix_conversations_instance_id", "instance_id"),
        # Every WhatsApp reply reads when its chat's customer last wrote, closed conversations too.
        Index("ix_conversations_channel_chat", "channel_id", "chat_id"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    channel_id: Mapped[int] = mapped_column(ForeignKey("channels.id"))
    chat_id: Mapped[str] = mapped_column(String(255))
    instance_id: Mapped[int | None] = mapped_column(ForeignKey("instances.id"))
    status: Mapped[str] = mapped_column(String(16), default="active")
    external_user_id: Mapped[str | None] = mapped_column(String(255))
    external_username: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_message_at: Mapped[datetime | None]
    # When the customer last wrote (inbound only): WhatsApp's 24-hour customer-service window.
    customer_wrote_at: Mapped[datetime | None]
    closed_at: Mapped[datetime | None]
    # Who answers the customer (engine.operators): the operator holding it, and the group an AI step
    # handed it to.
    assignee: Mapped[str | None] = mapped_column(String(200))
    candidate_group: Mapped[str | None] = mapped_column(String(200))


class Message(db.Model):
    """A message of a conversation, in or out; ``delivery_id`` links an outgoing one to its (last)
    delivery. ``content``: what a text does not say (a messenger's ``message_type``, ``attachments``,
    a pressed ``button_id``; the ``buttons`` sent with an answer); None for plain text."""

    __tablename__ = "messages"
    __table_args__ = (Index("ix_messages_conversation_id", "conversation_id", "id"),
                      Index("ix_messages_delivery_id", "delivery_id"))  # retention: is a delivery still shown?
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id"))
    direction: Mapped[str] = mapped_column(String(3))
    author: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
    delivery_id: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    # an AI answer: the newest customer message it answered (its place in the model's history)
    reply_to_id: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    content: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class AiKnowledge(db.Model):
    """A step's knowledge text, stored once per tenant however many dialogs use it (up to 200,000
    characters each: a copy per chat would grow with the traffic)."""

    __tablename__ = "ai_knowledge"
    __table_args__ = (UniqueConstraint("tenant_id", "sha256"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    sha256: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AiDialog(db.Model):
    """The state of one waiting ``ai_chat`` step: its settings (prompt rendered when it opened),
    the customer messages it has answered, and which turn job is talking to the model.

    Kept beside the instance, not in it: a turn changes this row and the transcript, never the
    process state, so a long chat neither grows the task tree nor takes the instance's lock.
    """

    __tablename__ = "ai_dialogs"
    __table_args__ = (UniqueConstraint("instance_id", "spiff_task_id"),
                      Index("ix_ai_dialogs_conversation_status", "conversation_id", "status"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id"))
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id"))
    spiff_task_id: Mapped[str] = mapped_column(String(36))
    element_id: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), default="active")  # active, done, ended
    system_prompt: Mapped[str] = mapped_column(Text, default="")
    knowledge_id: Mapped[int | None] = mapped_column(ForeignKey("ai_knowledge.id"))
    model: Mapped[str | None] = mapped_column(String(200))
    max_turns: Mapped[int] = mapped_column(Integer)
    handoff_keywords: Mapped[list[str]] = mapped_column(JSON, default=list)
    handoff_groups: Mapped[list[str] | None] = mapped_column(JSON)  # groups the model may hand over to
    turns: Mapped[int] = mapped_column(Integer, default=0)
    answered_through: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), default=0)
    last_answer: Mapped[str | None] = mapped_column(Text)
    busy_job_id: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    busy_until: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[datetime | None]


class InboundReceipt(db.Model):
    """A messenger call item already taken (its ``external_id``: Telegram ``<bot id>:<update_id>``, Viber
    ``message_token``, WhatsApp ``wamid``): a retried call finds it and is acknowledged, not processed."""

    __tablename__ = "inbound_receipts"
    __table_args__ = (UniqueConstraint("channel_id", "external_id", name="uq_inbound_receipts_channel_external"),
                      Index("ix_inbound_receipts_created_at", "created_at"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    channel_id: Mapped[int] = mapped_column(ForeignKey("channels.id"))
    external_id: Mapped[str] = mapped_column(String(300))
    kind: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class UnreachableChat(db.Model):
    """A customer who blocked the bot or unsubscribed: deliveries to the chat are dead at once, with ``reason``."""

    __tablename__ = "unreachable_chats"
    __table_args__ = (UniqueConstraint("channel_id", "chat_id", name="uq_unreachable_chats_channel_chat"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    channel_id: Mapped[int] = mapped_column(ForeignKey("channels.id"))
    chat_id: Mapped[str] = mapped_column(String(255))
    reason: Mapped[str] = mapped_column(Text)
    since: Mapped[datetime] = mapped_column(default=utcnow)


class ChatAttachment(db.Model):
    """A file a customer sent through a messenger: ``id`` is what the message and the ``attachments``
    variable name it by (``GET /v1/media/{binding_id}/{id}``); ``source`` is the messenger's own
    reference (Telegram and WhatsApp a file / media id, Viber a URL), never shown."""

    __tablename__ = "chat_attachments"
    __table_args__ = (Index("ix_chat_attachments_conversation_id", "conversation_id"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    channel_id: Mapped[int] = mapped_column(ForeignKey("channels.id"))
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id"))
    kind: Mapped[str] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(Text)
    name: Mapped[str | None] = mapped_column(String(255))
    mime_type: Mapped[str | None] = mapped_column(String(255))
    size: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SendPacing(db.Model):
    """When a messenger may next be called for a key (a bot, a chat, a number): the pace of sending,
    shared by every worker process (``engine.chat.pacing``)."""

    __tablename__ = "send_pacing"
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    next_at: Mapped[datetime]
