"""The tables. Every row that belongs to an organisation carries ``tenant_id``; every query filters on it."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from engine.store.db import db, utcnow
from engine.store.waiting_models import EventSubscription, ExternalTask  # every table is importable from here

__all__ = ["AiDialog", "AiKnowledge", "ApiKey", "Channel", "Conversation", "Definition", "Delivery",
           "EventSubscription", "ExternalTask", "IdempotencyRecord", "Instance", "Job", "Message", "Task",
           "Tenant", "WebhookRoute"]

# SQLite only makes INTEGER PRIMARY KEY an auto-increment alias; PostgreSQL gets a BIGINT identity.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Tenant(db.Model):
    __tablename__ = "tenants"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(db.Model):
    """An API key. Only a SHA-256 of the key is stored; ``prefix`` finds the row without the secret."""

    __tablename__ = "api_keys"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    permissions: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


class Definition(db.Model):
    """One published version of a BPMN process; the parsed spec is stored once, here."""

    __tablename__ = "definitions"
    __table_args__ = (UniqueConstraint("tenant_id", "code", "version"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    code: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer)
    process_id: Mapped[str] = mapped_column(String(255))
    name: Mapped[str | None] = mapped_column(String(255))
    # Large and rarely needed: loaded only when read (a webhook start needs neither).
    bpmn_xml: Mapped[str] = mapped_column(Text, deferred=True)
    dmn_xml: Mapped[list[str] | None] = mapped_column(JSON, deferred=True)  # the DMN files deployed with it
    spec_json: Mapped[str] = mapped_column(Text, deferred=True)
    start_events: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookRoute(db.Model):
    """The secret URL id of a webhook start event; it belongs to (tenant, code, start event), not a version."""

    __tablename__ = "webhook_routes"
    __table_args__ = (UniqueConstraint("tenant_id", "code", "start_event_id"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    code: Mapped[str] = mapped_column(String(200))
    start_event_id: Mapped[str] = mapped_column(String(255))
    webhook_id: Mapped[str] = mapped_column(String(64), unique=True)
    secret: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    rotated_at: Mapped[datetime | None]


class IdempotencyRecord(db.Model):
    """The first answer to a webhook call with an ``Idempotency-Key``, replayed for 24 hours."""

    __tablename__ = "idempotency_records"
    __table_args__ = (UniqueConstraint("route_id", "key"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    route_id: Mapped[int] = mapped_column(ForeignKey("webhook_routes.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(255))
    response: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class Instance(db.Model):
    """One run of a definition. ``state`` is the SpiffWorkflow JSON without the spec.

    ``revision`` grows on every save; a save that does not find the revision it loaded is
    refused (compare-and-swap), so two workers can never both advance one instance.
    """

    __tablename__ = "instances"
    __table_args__ = (Index("ix_instances_tenant_status_id", "tenant_id", "status", "id"),
                      Index("ix_instances_tenant_definition_id", "tenant_id", "definition_id", "id"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    definition_id: Mapped[int] = mapped_column(ForeignKey("definitions.id"))
    status: Mapped[str] = mapped_column(String(16), default="running")
    revision: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str | None] = mapped_column(Text)
    variables: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    output_keys: Mapped[list[str] | None] = mapped_column(JSON)
    waiting_for: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    # code -> definition id of every call activity target, pinned when the instance first needs it
    called_definitions: Mapped[dict[str, int] | None] = mapped_column(JSON)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None]


class Job(db.Model):
    """Durable work: written in the same transaction as the state change that causes it.

    A claimed job carries a lease (``locked_until``); when its worker dies the lease runs out and
    another worker claims it again. Delayed jobs wait for ``run_at``.
    """

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_run_at_id", "run_at", "id"), Index("ix_jobs_instance_id", "instance_id"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    instance_id: Mapped[int | None] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    run_at: Mapped[datetime] = mapped_column(default=utcnow)
    locked_until: Mapped[datetime | None]
    locked_by: Mapped[str | None] = mapped_column(String(64))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Task(db.Model):
    """A human task (userTask/manualTask) waiting for a person; written with the instance state.

    ``spiff_task_id`` ties the row to the SpiffWorkflow task it stands for. ``variables`` is what
    the task sees when it opens; ``form`` and ``buttons`` come from the BPMN element.
    ``callback_token_hash``: hex SHA-256 of a headless task's callback token (§7); None otherwise.
    """

    __tablename__ = "tasks"
    __table_args__ = (
        UniqueConstraint("instance_id", "spiff_task_id"),
        Index("ix_tasks_tenant_status_id", "tenant_id", "status", "id"),
        Index("ix_tasks_tenant_instance_id", "tenant_id", "instance_id", "id"),
        Index("ix_tasks_tenant_definition_id", "tenant_id", "definition_id", "id"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    definition_id: Mapped[int] = mapped_column(ForeignKey("definitions.id"))
    spiff_task_id: Mapped[str] = mapped_column(String(36))
    element_id: Mapped[str] = mapped_column(String(255))
    name: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), default="in_progress")
    form: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    buttons: Mapped[list[str]] = mapped_column(JSON, default=list)
    variables: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None]
    callback_token_hash: Mapped[str | None] = mapped_column(String(64))


class Channel(db.Model):
    """A configured connection (web-chat now; messengers later). Secrets are never returned."""

    __tablename__ = "channels"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    type: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    webhook_url: Mapped[str | None] = mapped_column(String(2000))
    webhook_secret: Mapped[str | None] = mapped_column(String(255))
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    enabled: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Conversation(db.Model):
    """One customer (a chat_id on a channel) talking with one running instance: the binding."""

    __tablename__ = "conversations"
    __table_args__ = (
        # At most one active conversation per (channel, chat_id).
        Index("ux_conversations_active_chat", "channel_id", "chat_id", unique=True,
              sqlite_where=text("status = 'active'"), postgresql_where=text("status = 'active'")),
        Index("ix_conversations_tenant_status_id", "tenant_id", "status", "id"),
        Index("ix_conversations_instance_id", "instance_id"),
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
    closed_at: Mapped[datetime | None]


class Message(db.Model):
    """A message of a conversation, in or out; ``delivery_id`` links an outgoing one to its delivery."""

    __tablename__ = "messages"
    __table_args__ = (Index("ix_messages_conversation_id", "conversation_id", "id"),)
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
    turns: Mapped[int] = mapped_column(Integer, default=0)
    answered_through: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), default=0)
    last_answer: Mapped[str | None] = mapped_column(Text)
    busy_job_id: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    busy_until: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[datetime | None]


class Delivery(db.Model):
    """One outbound HTTP POST, durable and at-least-once; ``body`` holds the exact bytes signed and sent.

    Deliveries of one ``ordering_key`` (channel + chat) go out one after another, oldest first.
    """

    __tablename__ = "deliveries"
    __table_args__ = (Index("ix_deliveries_ordering", "ordering_key", "id"),
                      Index("ix_deliveries_tenant_status_id", "tenant_id", "status", "id"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    channel_id: Mapped[int | None] = mapped_column(ForeignKey("channels.id"))
    ordering_key: Mapped[str] = mapped_column(String(300))
    delivery_uid: Mapped[str] = mapped_column(String(64), unique=True)
    event: Mapped[str] = mapped_column(String(32), default="message")
    url: Mapped[str] = mapped_column(String(2000))
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    next_attempt_at: Mapped[datetime | None]
    sent_at: Mapped[datetime | None]
