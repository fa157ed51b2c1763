"""Retention: what ended long ago is removed, so that storage stays bounded (``BATON_RETENTION_DAYS``).

Removed, tenant by tenant, in small batches (``Purging``: ``batch_size`` rows each, a unit of work
of its own, so no lock is held for long and other writers interleave between batches):

- instances that ended (completed, failed, cancelled) before the cutoff, with everything that
  hangs off them: human tasks, external tasks, event subscriptions, their jobs (a failed
  instance's held jobs), AI dialogs, and their conversations (closed when the instance ended)
  with those conversations' messages;
- deliveries sent before the cutoff that no remaining message points to (CRM task events, and
  the answers of the conversations just removed);
- idempotency records older than their 24-hour window (whatever the retention);
- messenger inbound receipts older than the cutoff and older than 7 days (messengers retry a
  call for up to a week; a receipt younger than that still stops a duplicate).

Never removed: a running instance (nor one that is running again after ``process.retry``), an
ended instance that still has a due or leased job (it is removed on a later pass, once the job is
done), an instance whose conversation is still active, a conversation of a running instance
(closed or not), a queued or dead delivery (a dead one waits for ``delivery.retry``), and anything
that ended after an HTTP task call or thrown event of the tenant that is still pending (such a
job names its instance only in its payload). Everything else a running instance uses is its own
row: call activities run inside their parent's state, so no other instance's rows are needed.

Runs as one recurring ``retention`` job (every ``BATON_RETENTION_EVERY_S``; ``schedule`` makes
sure it exists, ``RetentionRunner`` handles it) and by ``flask --app app retention``. Both may run
at once, and two workers may: each batch picks its rows anew (on PostgreSQL skipping rows another
purge has locked), so a second run only finds less to do.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable

from sqlalchemy import delete, exists, func, or_, select, text, update

from engine import jobs
from engine.jobs.kinds import OPERATOR, RETENTION, THROWN
from engine.store.db import utcnow
from engine.store.models import (AiDialog, AuditEntry, ChatAttachment, Conversation, Delivery, EventSubscription,
                                 ExternalTaskRow, HistoryEvent, IdempotencyRecord, InboundReceipt, Instance, Job, Message,
                                 Task, Tenant, WebhookRoute)
from engine.store.unit_of_work import UnitOfWork
from engine.telemetry import metrics

log = logging.getLogger("baton.retention")

ENDED = ("completed", "failed", "cancelled")
IDEMPOTENCY_WINDOW = timedelta(hours=24)  # the contract's replay window (§4.1)
RECEIPT_MIN_AGE = timedelta(days=7)       # WhatsApp retries an undelivered notification for up to 7 days
# Every table retention removes rows from, in the order the command prints them.
TABLES = ("instances", "tasks", "external_tasks", "event_subscriptions", "jobs", "history_events", "ai_dialogs",
          "conversations", "messages", "attachments", "deliveries", "idempotency_records", "inbound_receipts",
          "audit_log")
_SCHEDULE_LOCK = text("SELECT pg_advisory_xact_lock(CAST(:namespace AS integer), 0)")
_LOCK_NAMESPACE = 0x4252544E  # "BRTN"


@dataclass
class Purge:
    """What one purge removed (rows by table), how long each batch's transaction took, and whether
    it got through everything (False: it stopped at its time budget; the rest is for the next run)."""

    removed: Counter = field(default_factory=Counter)
    batch_seconds: list[float] = field(default_factory=list)
    finished: bool = True
    cutoff: datetime | None = None


class Purging:
    """One purge, batch by batch: its owner (the ``retention`` job, the command) runs each batch in a
    unit of work of its own and rests between them (``rest_s``).

    After each batch it rests ``rest`` times as long as the batch took: on SQLite a batch holds
    the one write lock, and back-to-back batches made every other writer queue behind the purge
    (bench/retention.py: concurrent webhook starts 10x slower at p50 without a rest)."""

    STEPS: tuple[Callable[..., tuple[int, Counter]], ...] = ()  # set below, after the batch functions

    def __init__(self, retention: timedelta, *, batch_size: int = 200, budget_s: float | None = None,
                 now: datetime | None = None, rest: float = 1.0, audit_retention: timedelta | None = None):
        self.now = utcnow() if now is None else now
        self.report = Purge(cutoff=self.now - retention)
        # The audit log has its own horizon (BATON_AUDIT_RETENTION_DAYS); None keeps it all.
        self.audit_cutoff = None if audit_retention is None else self.now - audit_retention
        self.batch_size, self.rest = batch_size, rest
        self.deadline = None if budget_s is None else time.monotonic() + budget_s
        self._todo: list[tuple[int, int]] | None = None  # (tenant id, step index) still to do
        self._last_took = 0.0

    def rest_s(self) -> float:
        """How long to rest before the next batch (a multiple of the last one's time)."""
        return self._last_took * self.rest

    def step(self, uow: UnitOfWork) -> bool:
        """Run the next batch in ``uow``; False when there is nothing more to do in this purge (all
        done, or its time budget spent: ``report.finished`` says which)."""
        if self._todo is None:
            tenant_ids = uow.execute(select(Tenant.id).order_by(Tenant.id)).scalars().all()
            self._todo = [(tenant_id, index) for tenant_id in tenant_ids for index in range(len(self.STEPS))]
        while self._todo:
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.report.finished = False
                return False
            tenant_id, index = self._todo[0]
            started = time.perf_counter()
            batch = self.STEPS[index]
            if batch is _audit_batch and self.audit_cutoff is None:
                self._todo.pop(0)
                continue
            cutoff = self.audit_cutoff if batch is _audit_batch else self.report.cutoff
            picked, removed = batch(uow, tenant_id, cutoff, self.now, self.batch_size)
            took = time.perf_counter() - started
            self._last_took = took if picked >= self.batch_size else 0.0  # a partial batch: the step is done
            self.report.batch_seconds.append(took)
            self.report.removed.update(removed)
            uow.after_commit(lambda removed=removed: _count(removed))
            if picked < self.batch_size:
                self._todo.pop(0)
            if picked:
                return bool(self._todo)
        return False


def _count(removed: Counter) -> None:
    for table, rows in removed.items():
        metrics.RETENTION_REMOVED.labels(table).inc(rows)


def _ids_in(uow: UnitOfWork, query) -> list[int]:
    return list(uow.run(query).scalars())


def _instances_batch(uow: UnitOfWork, tenant_id: int, cutoff: datetime, now: datetime, limit: int) -> tuple[int, Counter]:
    connection = uow.connection()
    # An HTTP task's call or a thrown event still pending names its instance only in its payload:
    # nothing that ended after the oldest such job was queued is removed until it is done.
    # A job kept aside after repeated failures (held) waits for an operator: only its own instance
    # is kept, or one stuck job would stop retention for good.
    pending_since = connection.execute(select(func.min(Job.created_at)).where(
        Job.tenant_id == tenant_id, Job.kind.in_((OPERATOR, THROWN)), Job.run_at < jobs.HELD_UNTIL)).scalar()
    held = {payload.get("instance_id") for payload in connection.execute(select(Job.payload).where(
        Job.tenant_id == tenant_id, Job.kind.in_((OPERATOR, THROWN)), Job.run_at >= jobs.HELD_UNTIL)).scalars()
        if isinstance(payload, dict)}
    # (A minute's margin: a thrower that ended in the advance that threw stamps its end a moment
    # before the job's creation.)
    horizon = cutoff if pending_since is None else min(cutoff, pending_since - timedelta(minutes=1))
    due_or_leased = exists().where(Job.instance_id == Instance.id, Job.run_at < jobs.HELD_UNTIL)
    active_chat = exists().where(Conversation.instance_id == Instance.id, Conversation.status == "active")
    pick = (select(Instance.id)
            .where(Instance.tenant_id == tenant_id, Instance.completed_at < horizon, Instance.status.in_(ENDED),
                   ~due_or_leased, ~active_chat,
                   *([Instance.id.not_in(sorted(i for i in held if isinstance(i, int)))] if held else []))
            .order_by(Instance.completed_at, Instance.id).limit(limit))
    if uow.postgres:  # a row a concurrent purge (or process.retry) holds is left to it
        pick = pick.with_for_update(of=Instance, skip_locked=True)
    ids = _ids_in(uow, pick)
    removed: Counter = Counter()
    if not ids:
        return 0, removed
    chats = _ids_in(uow, select(Conversation.id).where(Conversation.instance_id.in_(ids)))

    def remove(name: str, statement) -> None:
        removed[name] += connection.execute(statement).rowcount

    if chats:
        remove("messages", delete(Message).where(Message.conversation_id.in_(chats)))
        remove("attachments", delete(ChatAttachment).where(ChatAttachment.conversation_id.in_(chats)))
    remove("ai_dialogs", delete(AiDialog).where(
        or_(AiDialog.instance_id.in_(ids), AiDialog.conversation_id.in_(chats)) if chats
        else AiDialog.instance_id.in_(ids)))
    if chats:
        remove("conversations", delete(Conversation).where(Conversation.id.in_(chats)))
    for name, model in (("tasks", Task), ("external_tasks", ExternalTaskRow),
                        ("event_subscriptions", EventSubscription), ("jobs", Job),
                        ("history_events", HistoryEvent)):
        remove(name, delete(model).where(model.instance_id.in_(ids)))
    remove("instances", delete(Instance).where(Instance.id.in_(ids), Instance.status.in_(ENDED)))
    return len(ids), removed


def _deliveries_batch(uow: UnitOfWork, tenant_id: int, cutoff: datetime, now: datetime, limit: int) -> tuple[int, Counter]:
    connection = uow.connection()
    pick = (select(Delivery.id)
            .where(Delivery.tenant_id == tenant_id, Delivery.status == "sent", Delivery.sent_at < cutoff,
                   ~exists().where(Message.delivery_id == Delivery.id))
            .order_by(Delivery.sent_at, Delivery.id).limit(limit))
    ids = _ids_in(uow, pick)
    if not ids:
        return 0, Counter()
    # Still sent when deleted: a messenger's late "failed" receipt makes a delivery dead, and kept.
    gone = connection.execute(delete(Delivery).where(Delivery.id.in_(ids), Delivery.status == "sent")).rowcount
    return len(ids), Counter(deliveries=gone)


def _idempotency_batch(uow: UnitOfWork, tenant_id: int, cutoff: datetime, now: datetime, limit: int) -> tuple[int, Counter]:
    connection = uow.connection()
    routes = select(WebhookRoute.id).where(WebhookRoute.tenant_id == tenant_id)
    ids = _ids_in(uow, select(IdempotencyRecord.id).where(
        IdempotencyRecord.route_id.in_(routes), IdempotencyRecord.created_at < now - IDEMPOTENCY_WINDOW)
        .limit(limit))
    if not ids:
        return 0, Counter()
    gone = connection.execute(delete(IdempotencyRecord).where(IdempotencyRecord.id.in_(ids))).rowcount
    return len(ids), Counter(idempotency_records=gone)


def _receipts_batch(uow: UnitOfWork, tenant_id: int, cutoff: datetime, now: datetime, limit: int) -> tuple[int, Counter]:
    connection = uow.connection()
    ids = _ids_in(uow, select(InboundReceipt.id).where(
        InboundReceipt.tenant_id == tenant_id, InboundReceipt.created_at < min(cutoff, now - RECEIPT_MIN_AGE))
        .limit(limit))
    if not ids:
        return 0, Counter()
    gone = connection.execute(delete(InboundReceipt).where(InboundReceipt.id.in_(ids))).rowcount
    return len(ids), Counter(inbound_receipts=gone)


def _audit_batch(uow: UnitOfWork, tenant_id: int, cutoff: datetime, now: datetime, limit: int) -> tuple[int, Counter]:
    """Audit entries older than their own cutoff (the server-wide ones go with the first tenant's)."""
    connection = uow.connection()
    first = uow.execute(select(func.min(Tenant.id))).scalar()
    whose = AuditEntry.tenant_id == tenant_id
    if tenant_id == first:
        whose = or_(whose, AuditEntry.tenant_id.is_(None))
    ids = _ids_in(uow, select(AuditEntry.id).where(whose, AuditEntry.at < cutoff).limit(limit))
    if not ids:
        return 0, Counter()
    gone = connection.execute(delete(AuditEntry).where(AuditEntry.id.in_(ids))).rowcount
    return len(ids), Counter(audit_log=gone)


# --- the recurring job ------------------------------------------------------------------------

def schedule(uow: UnitOfWork) -> bool:
    """Make sure the one ``retention`` job exists (due now when it is new), in the unit of work. True
    when it was added. The job row belongs to the first tenant (a job needs one); it purges every
    tenant. Nothing is scheduled before a tenant exists: there is nothing to remove."""
    if uow.postgres:  # two processes starting at once must not both add one
        uow.execute(_SCHEDULE_LOCK, {"namespace": _LOCK_NAMESPACE})
    found = uow.execute(select(Job.id).where(Job.kind == RETENTION).limit(1)).first()
    owner = None if found is not None else uow.execute(select(func.min(Tenant.id))).scalar()
    if owner is None:
        return False
    jobs.enqueue(uow, owner, RETENTION)
    return True


class RetentionRunner:
    """Job handler for the ``retention`` job: purges within a time budget (shorter than the job's
    lease, so no second worker takes it over meanwhile), then moves its own row to the next run:
    at once when the budget ran out (other due jobs go first: they are older), else ``every_s`` on.
    ``retention`` None or zero: removes nothing, and keeps the schedule for processes configured
    to remove."""

    def __init__(self, retention: timedelta | None, *, every_s: float, batch_size: int, budget_s: float,
                 audit_retention: timedelta | None = None):
        self.retention = retention if retention else None
        self.audit_retention = audit_retention
        self.every_s = every_s
        self.batch_size = batch_size
        self.budget_s = budget_s

    def handle(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> jobs.Then | None:
        # A second retention job (two processes scheduled one at the same moment) is dropped by
        # the first: the oldest row is the schedule.
        uow.execute(delete(Job).where(Job.kind == RETENTION, Job.id > job.id))
        if self.retention is None:
            _reschedule(uow, job, worker_id, self.every_s)
            return None
        purging = Purging(self.retention, batch_size=self.batch_size, budget_s=self.budget_s,
                          audit_retention=self.audit_retention)
        return jobs.Then(step=lambda uow, _: self._batch(uow, job, worker_id, purging))

    def _batch(self, uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, purging: Purging) -> jobs.Then | None:
        """One batch per unit of work, a rest between them; at the end the job moves to its next run."""
        if purging.step(uow):
            return jobs.Then(call=lambda: time.sleep(purging.rest_s()),
                             step=lambda uow, _: self._batch(uow, job, worker_id, purging))
        if purging.report.removed:
            log.info("retention removed %s", dict(purging.report.removed))
        _reschedule(uow, job, worker_id, 0.0 if not purging.report.finished else self.every_s)
        return None

    def give_up(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        """Failing again and again (the log has why): the schedule goes on at the next period."""
        _reschedule(uow, job, worker_id, self.every_s)


def _reschedule(uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, delay_s: float) -> None:
    uow.execute(update(Job).where(Job.id == job.id, Job.locked_by == worker_id).values(
        run_at=utcnow() + timedelta(seconds=delay_s), locked_by=None, locked_until=None, attempts=0,
        last_error=None))


Purging.STEPS = (_instances_batch, _deliveries_batch, _idempotency_batch, _receipts_batch, _audit_batch)
