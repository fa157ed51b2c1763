"""Durable outbound deliveries: queued in the caller's transaction, at least once, in order per
ordering key; their administration (``delivery.list``, ``delivery.retry``, messenger receipts).

``queue`` adds a delivery and its one ``deliver`` job to the caller's transaction; the job's
handler (``delivery_runner.DeliveryRunner``) decides, sends with no transaction open, and records,
with the per-key primitives below (``lock_key``, ``head``, ``put_back``, ``wake_head``). How the
one job per delivery, the ordering, retries and secrets work: docs/internals.md, "Durable delivery".
"""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from uuid import uuid4

from sqlalchemy import bindparam, case, insert, or_, select, text, update

from engine import jobs
from engine.jobs.kinds import DELIVER
from engine.errors import ConflictError, NotFoundError
from engine.outbound import standard_webhooks
from engine.store import sealing
from engine.store.db import is_postgres, iso, utcnow
from engine.store.models import Delivery, Job
from engine.store.paging import page_of
from engine.store.unit_of_work import UnitOfWork

QUEUED, SENT, DEAD = "queued", "sent", "dead"
STATUSES = (QUEUED, SENT, DEAD)
RECEIPTS = ("delivered", "read", "failed")   # what a messenger reports about a sent message

HELD = jobs.HELD_UNTIL  # run_at of a dead delivery's job: kept for delivery.retry, never due

_LOCK_NAMESPACE = 0x42444C56  # first key of pg_advisory_xact_lock(int, int): "BDLV"
_PG_KEY_LOCK = text("SELECT pg_advisory_xact_lock(CAST(:namespace AS integer), hashtext(CAST(:key AS text)))")
_MAX_URL, _MAX_KEY, _MAX_EVENT = 2000, 300, 32  # the column sizes


# --- the API other modules call, inside their own transaction ------------------------------------

def message_payload(chat_id: str, text: str, timestamp: datetime,
                    buttons: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The web-chat message body of §4.3; ``timestamp`` is naive UTC (``utcnow()``) or aware.
    ``buttons`` (``[{id, title}]``) are added only when the message has some."""
    if timestamp.tzinfo is not None:
        timestamp = timestamp.astimezone(timezone.utc).replace(tzinfo=None)
    payload: dict[str, Any] = {"chat_id": chat_id, "text": text, "reply_to_message_id": None,
                               "timestamp": iso(timestamp)}
    if buttons:
        payload["buttons"] = buttons
    return payload


def encode_body(payload: dict[str, Any]) -> str:
    """Compact JSON, non-ASCII kept as UTF-8; strict (no NaN). ValueError when it cannot be sent."""
    if not isinstance(payload, dict):
        raise ValueError("A delivery payload must be a JSON object.")
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    body.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError (a ValueError) here, not at send
    return body


@dataclass(frozen=True)
class Queued:
    """A delivery just queued: its row's id and uid (its other columns are what ``queue`` was given)."""

    id: int
    delivery_uid: str
    status: str = QUEUED


_INSERT = insert(Delivery.__table__).values(
    tenant_id=bindparam("tenant_id"), channel_id=bindparam("channel_id"), ordering_key=bindparam("ordering_key"),
    delivery_uid=bindparam("delivery_uid"), event=bindparam("event"), url=bindparam("url"), body=bindparam("body"),
    status=QUEUED, attempts=0, created_at=bindparam("now"), next_attempt_at=bindparam("now"),
).returning(Delivery.__table__.c.id)


def queue(uow: UnitOfWork, tenant_id: int, *, url: str, payload: dict[str, Any], secret: str | None, ordering_key: str,
          channel_id: int | None, event: str = "message") -> Queued:
    """Add a delivery and its ``deliver`` job to the caller's unit of work.

    ``secret`` (None or empty: unsigned) is kept only in the job's payload; with ``channel_id`` the
    channel's current secret is used instead while the channel exists. Raises ValueError for
    arguments no delivery could be made of. A Core insert (every answer of a chat queues one).
    """
    body = encode_body(payload)
    for name, value, limit in (("url", url, _MAX_URL), ("ordering_key", ordering_key, _MAX_KEY),
                               ("event", event, _MAX_EVENT)):
        if not isinstance(value, str) or not value or len(value) > limit:
            raise ValueError(f"A delivery's {name} must be a non-empty string of at most {limit} characters.")
    now, uid = utcnow(), uuid4().hex
    delivery_id = uow.run(_INSERT, {
        "tenant_id": tenant_id, "channel_id": channel_id, "ordering_key": ordering_key, "delivery_uid": uid,
        "event": event, "url": url, "body": body, "now": now}).scalar_one()
    job_payload: dict[str, Any] = {"delivery_id": delivery_id}
    if secret:
        job_payload["secret"] = sealing.seal(secret)  # never in the clear at rest
    jobs.enqueue(uow, tenant_id, DELIVER, payload=job_payload, run_at=now)
    return Queued(delivery_id, uid)


def signature(secret: str, body: bytes) -> str:
    """``X-Baton-Signature``: ``sha256=`` and the hex HMAC-SHA256 of the exact body bytes."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def request_headers(delivery_uid: str, body: bytes, secret: str | None, now_s: float | None = None) -> dict[str, str]:
    """The headers of an attempt; signed, with a secret, both Baton's way and the Standard
    Webhooks way (``webhook-id`` is the delivery's uid, the same on every attempt)."""
    timestamp = int(time.time() if now_s is None else now_s)
    headers = {"Content-Type": "application/json; charset=utf-8", "X-Baton-Delivery": delivery_uid,
               "X-Baton-Timestamp": str(timestamp)}
    if secret:
        headers["X-Baton-Signature"] = signature(secret, body)
        headers.update(standard_webhooks.headers(secret, delivery_uid, timestamp, body))
    return headers


# --- administration (delivery.list, delivery.retry) -----------------------------------------------

def list_deliveries(uow: UnitOfWork, tenant_id: int, *, status: str | None, page: int, per_page: int,
                    failing: bool = False) -> dict[str, Any]:
    """One page of the tenant's deliveries, newest first. Neither bodies nor secrets are shown.
    ``failing``: only queued ones that failed at least once and wait for their next attempt."""
    conditions = [Delivery.tenant_id == tenant_id]
    if status is not None:
        conditions.append(Delivery.status == status)
    if failing:
        conditions += [Delivery.status == QUEUED, Delivery.attempts > 0]
    query = select(Delivery.id, Delivery.delivery_uid, Delivery.channel_id, Delivery.event, Delivery.url,
                   Delivery.status, Delivery.attempts, Delivery.last_status, Delivery.last_error,
                   Delivery.created_at, Delivery.next_attempt_at, Delivery.sent_at, Delivery.external_id,
                   Delivery.receipt).where(*conditions)
    listed = page_of(uow, query, Delivery.id, page=page, per_page=per_page, item=lambda r: {
        "delivery_id": r.id, "delivery_uid": r.delivery_uid, "channel_id": r.channel_id, "event": r.event,
        "url": r.url, "status": r.status, "attempts": r.attempts, "last_status": r.last_status,
        "last_error": r.last_error, "created_at": iso(r.created_at),
        "next_attempt_at": iso(r.next_attempt_at), "sent_at": iso(r.sent_at),
        "external_id": r.external_id, "receipt": r.receipt})
    return listed


def retry(uow: UnitOfWork, tenant_id: int, delivery_id: int) -> dict[str, Any]:
    """Queue a dead (or queued) delivery again, now, with a new retry round; same uid."""
    key = uow.execute(select(Delivery.ordering_key).where(
        Delivery.tenant_id == tenant_id, Delivery.id == delivery_id)).scalar()
    if key is None:
        raise NotFoundError(f"Delivery {delivery_id} not found.")
    lock_key(uow, key)
    row = uow.execute(select(Delivery).where(Delivery.id == delivery_id)
                             .execution_options(populate_existing=True)).scalar_one()
    if row.status == SENT:
        raise ConflictError(f"Delivery {delivery_id} was already sent.")
    now = utcnow()
    row.status, row.next_attempt_at = QUEUED, now
    # Its job decides again whether it may go (it may have to wait for an earlier delivery).
    wake(uow, tenant_id, row.id, now, new_round={"since": now.isoformat(), "base": row.attempts})
    return {"delivery_id": delivery_id, "status": QUEUED}


def record_receipt(uow: UnitOfWork, channel_id: int, external_id: str, receipt: str, reason: str | None) -> bool:
    """In the caller's transaction: what a messenger reported about the message it accepted as
    ``external_id``. ``failed`` makes a sent delivery dead with the messenger's reason (``delivery.retry``
    re-sends it); ``delivered`` / ``read`` are only noted. False when no delivery has that id."""
    if receipt not in RECEIPTS:
        raise ValueError(f"unknown receipt {receipt!r}")
    row = uow.execute(select(Delivery).where(Delivery.channel_id == channel_id,
                                                    Delivery.external_id == external_id)
                             .order_by(Delivery.id.desc()).limit(1)).scalar_one_or_none()
    if row is None:
        return False
    lock_key(uow, row.ordering_key)
    if receipt == "failed":
        row.receipt = receipt
        if row.status == SENT:
            row.status, row.last_error = DEAD, f"The messenger reported it failed: {reason or 'no reason given'}"
    elif row.receipt != "read":          # statuses may arrive out of order: read stays read
        row.receipt = receipt
    return True


def wake_key(uow: UnitOfWork, tenant_id: int, ordering_key: str) -> None:
    """Make the head of ``ordering_key`` try now, in the caller's transaction (a waiting delivery
    to a customer who can no longer be reached dies now instead of at its next retry)."""
    lock_key(uow, ordering_key)
    wake_head(uow, tenant_id, ordering_key, utcnow())


# --- the per-key primitives the runner uses ------------------------------------------------------

def lock_key(uow: UnitOfWork, ordering_key: str, namespace: int = _LOCK_NAMESPACE) -> None:
    """Serialize, per ordering key, the transactions that decide and record (released at commit);
    another ``namespace`` keeps another kind of key apart (``delivery_drain``'s destinations)."""
    if is_postgres():
        uow.execute(_PG_KEY_LOCK, {"namespace": namespace, "key": ordering_key})
    # SQLite: every transaction began with BEGIN IMMEDIATE, so it holds the database's write lock.


# Built once: head() runs twice for every delivery sent (deciding, and waking the next one).
_HEAD = (select(Delivery.id).where(Delivery.tenant_id == bindparam("tenant_id"),
                                   Delivery.ordering_key == bindparam("ordering_key"), Delivery.status == QUEUED)
         .order_by(case((Delivery.attempts > 0, 0), else_=1), Delivery.id).limit(1))


def head(uow: UnitOfWork, tenant_id: int, ordering_key: str) -> int | None:
    """The id of the delivery of this key that may go next, or None when none is queued."""
    return uow.run(_HEAD, {"tenant_id": tenant_id, "ordering_key": ordering_key}).scalar()


def round_of(job_payload: dict[str, Any], created_at: datetime) -> tuple[datetime, int]:
    """When the current retry round began and the attempts made before it."""
    since = job_payload.get("since")
    return (datetime.fromisoformat(since) if since else created_at), int(job_payload.get("base") or 0)


_put_back_statement = (
    update(Job).where(Job.id == bindparam("job_id"), Job.locked_by == bindparam("worker_id"))
    .values(run_at=bindparam("run_at"), locked_by=None, locked_until=None, attempts=0, last_error=None))


def put_back(uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, run_at: datetime, payload: dict[str, Any] | None = None) -> bool:
    """Give the job back until ``run_at`` inside the current transaction (with a new ``payload`` when
    given); False if the lease was lost.

    Unlike ``jobs.release`` it the job's attempts: those count the handler's own failures (WorkerPool gives up after a
    few), while the delivery counts the receiver's.
    """
    params = {"job_id": job.id, "worker_id": worker_id, "run_at": run_at}
    if payload is None:
        return uow.run(_put_back_statement, params).rowcount == 1
    result = uow.execute(_put_back_statement.values(payload=payload).execution_options(synchronize_session=False),
                                params)
    return result.rowcount == 1


def wake_head(uow: UnitOfWork, tenant_id: int, ordering_key: str, now: datetime) -> None:
    first = head(uow, tenant_id, ordering_key)
    if first is not None:
        wake(uow, tenant_id, first, now)


def wake(uow: UnitOfWork, tenant_id: int, delivery_id: int, now: datetime, new_round: dict[str, Any] | None = None) -> None:
    """Make the delivery's job due now (unless a worker holds it right now); workers are woken at commit."""
    job = uow.execute(
        select(Job.id, Job.payload).where(Job.kind == DELIVER, Job.tenant_id == tenant_id,
                                          Job.payload["delivery_id"].as_integer() == delivery_id)
        .order_by(Job.id).limit(1)).first()
    if job is None:  # not expected (a delivery keeps its job until sent); make one
        jobs.enqueue(uow, tenant_id, DELIVER, payload={"delivery_id": delivery_id, **(new_round or {})}, run_at=now)
        return
    values: dict[str, Any] = {"run_at": now}
    if new_round:
        values["payload"] = {**job.payload, **new_round}
    uow.execute(update(Job).where(Job.id == job.id, or_(Job.locked_until.is_(None), Job.locked_until < now))
                       .values(**values).execution_options(synchronize_session=False))
    uow.ready(DELIVER)  # moving a parked job's run_at must wake the workers too
