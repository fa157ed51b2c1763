"""The tables. Every row that belongs to an organisation carries ``tenant_id``; every query filters on it."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from engine.store.db import BigId, db, utcnow
from engine.store.sealing import SealedText

NO_DUE_DATE = datetime(9999, 12, 31)  # Task.due_order of a task without a due date: sorted last


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
    # The operator the key stands for (engine.operators): who claims tasks and conversations with it.
    user: Mapped[str | None] = mapped_column(String(200))
    groups: Mapped[list[str] | None] = mapped_column(JSON)


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
    # The Camunda Forms deployed with it: form id -> forms.id (a formRef with binding "deployment").
    forms: Mapped[dict[str, int] | None] = mapped_column(JSON)


class WebhookRoute(db.Model):
    """The secret URL id of a webhook start event; it belongs to (tenant, code, start event), not a version."""

    __tablename__ = "webhook_routes"
    __table_args__ = (UniqueConstraint("tenant_id", "code", "start_event_id"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    code: Mapped[str] = mapped_column(String(200))
    start_event_id: Mapped[str] = mapped_column(String(255))
    webhook_id: Mapped[str] = mapped_column(String(64), unique=True)
    secret: Mapped[str | None] = mapped_column(SealedText)  # sealed at rest (engine.store.sealing)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    rotated_at: Mapped[datetime | None]


class AuditEntry(db.Model):
    """An administration call (``engine.audit``): who, when, which method, which object; never a secret.
    ``tenant_id`` None: an act on the whole server (``flask secrets rotate``), shown to every tenant."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_tenant_id_id", "tenant_id", "id"), Index("ix_audit_log_at", "at"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    actor_type: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(200))
    key_id: Mapped[int | None] = mapped_column(BigInteger)
    method: Mapped[str] = mapped_column(String(64))
    target_kind: Mapped[str | None] = mapped_column(String(32))
    target_id: Mapped[str | None] = mapped_column(String(255))


class WebhookMessageId(db.Model):
    """A Standard Webhooks ``webhook-id`` a route accepted: the same id again within the window is a
    replay (refused). Kept ``engine.webhooks.SEEN_WINDOW``, removed by the calls after that."""

    __tablename__ = "webhook_message_ids"
    __table_args__ = (UniqueConstraint("route_id", "message_id"), Index("ix_webhook_message_ids_seen_at", "seen_at"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    route_id: Mapped[int] = mapped_column(ForeignKey("webhook_routes.id", ondelete="CASCADE"))
    message_id: Mapped[str] = mapped_column(String(255))
    seen_at: Mapped[datetime] = mapped_column(default=utcnow)


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
                      Index("ix_instances_tenant_definition_id", "tenant_id", "definition_id", "id"),
                      Index("ix_instances_tenant_completed_at", "tenant_id", "completed_at"))  # retention
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
    # Who started it (an actor, engine.store.history): the database's trigger writes the history's
    # ``started`` event from it, and its ``completed`` event when the status becomes completed.
    started_by: Mapped[dict[str, str] | None] = mapped_column(JSON)


class InstanceSteps(db.Model):
    """Elements an instance passed that were pruned from its stored task tree (``engine.store.pruning``),
    appended by the save that pruned them: ``steps`` is a list of ``[at (epoch s), process,
    task spec, from element, TaskState]``. ``engine.insight.read_path`` reads them with the tree."""

    __tablename__ = "instance_steps"
    __table_args__ = (Index("ix_instance_steps_instance_id", "instance_id", "id"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    instance_id: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    steps: Mapped[list[list[Any]]] = mapped_column(JSON)


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
    Assignment (``engine.operators``): ``assignee`` holds it; ``candidate_users`` and ``candidate_groups``
    may claim it; ``due_order`` is ``due_at``, or the far future when there is none (so one index
    orders "earliest due first, undated last" on both databases); ``form_id``: its Camunda Form.
    """

    __tablename__ = "tasks"
    __table_args__ = (
        UniqueConstraint("instance_id", "spiff_task_id"),
        Index("ix_tasks_tenant_status_id", "tenant_id", "status", "id"),
        Index("ix_tasks_tenant_instance_id", "tenant_id", "instance_id", "id"),
        Index("ix_tasks_tenant_definition_id", "tenant_id", "definition_id", "id"),
        Index("ix_tasks_tenant_assignee_status_id", "tenant_id", "assignee", "status", "id"),
        Index("ix_tasks_tenant_status_due_id", "tenant_id", "status", "due_order", "id"),
        Index("ix_tasks_tenant_status_priority_id", "tenant_id", "status", "priority", "id"),
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
    assignee: Mapped[str | None] = mapped_column(String(200))
    candidate_users: Mapped[list[str] | None] = mapped_column(JSON)
    candidate_groups: Mapped[list[str] | None] = mapped_column(JSON)
    due_at: Mapped[datetime | None]
    due_order: Mapped[datetime] = mapped_column(default=NO_DUE_DATE)
    follow_up_at: Mapped[datetime | None]
    priority: Mapped[int] = mapped_column(Integer, default=50)
    form_id: Mapped[int | None] = mapped_column(ForeignKey("forms.id"))


class Delivery(db.Model):
    """One outbound HTTP POST, durable and at-least-once; ``body`` holds the exact bytes signed and sent.

    Deliveries of one ``ordering_key`` (channel + chat) go out one after another, oldest first.
    A messenger delivery's ``url`` is ``<type>:<API method>`` and its ``body`` the stored call, sent
    with the channel's current credentials; ``external_id`` is the messenger's id of the sent message
    and ``receipt`` what the messenger reported about it since (delivered, read, failed).
    """

    __tablename__ = "deliveries"
    __table_args__ = (Index("ix_deliveries_ordering", "ordering_key", "id"),
                      Index("ix_deliveries_tenant_status_id", "tenant_id", "status", "id"),
                      Index("ix_deliveries_channel_external_id", "channel_id", "external_id"),
                      Index("ix_deliveries_tenant_status_sent_at", "tenant_id", "status", "sent_at"))  # retention
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
    external_id: Mapped[str | None] = mapped_column(String(255))
    receipt: Mapped[str | None] = mapped_column(String(16))


class RateLimitWindow(db.Model):
    """One rate-limit bucket (``k<api key id>``, ``w<webhook id>``): its hits in the window ending at
    ``window_end`` (epoch seconds). Counted only on PostgreSQL, where it is an UNLOGGED table (no
    write-ahead log: the counts may be lost in a crash, and cost no disk flush); ``engine.rate_limits``."""

    __tablename__ = "rate_limit_windows"
    bucket: Mapped[str] = mapped_column(String(80), primary_key=True)
    window_end: Mapped[int] = mapped_column(BigInteger)
    hits: Mapped[int] = mapped_column(Integer)


# The chat tables and the tables of what instances wait for live in their own modules; importing
# them here registers them with the metadata, and every table is importable from here.
from engine.store.chat_models import (AiDialog, AiKnowledge, Channel, ChatAttachment, Conversation,  # noqa: E402
                                      InboundReceipt, Message, SendPacing, UnreachableChat)
from engine.store.waiting_models import EventSubscription, ExternalTaskRow  # noqa: E402
from engine.store.task_counts import TaskCount  # noqa: E402
from engine.store.operator_models import Form, TaskAudience  # noqa: E402
from engine.store.history import HistoryEvent  # noqa: E402

__all__ = ["AiDialog", "AiKnowledge", "ApiKey", "Channel", "ChatAttachment", "Conversation", "Definition", "Delivery",
           "EventSubscription", "ExternalTaskRow", "Form", "HistoryEvent", "IdempotencyRecord", "InboundReceipt", "Instance",
           "InstanceSteps", "Job", "Message", "RateLimitWindow", "SendPacing", "Task", "TaskAudience", "TaskCount", "Tenant",
           "UnreachableChat", "WebhookRoute"]
