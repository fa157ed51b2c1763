"""Durable outbound deliveries: signed JSON POSTs, at least once, in order per ordering key.

``queue`` adds a delivery and its one ``deliver`` job to the caller's transaction; the job's
handler (``DeliveryRunner``) decides, POSTs with no transaction open, and records. How the one
job per delivery, the ordering, retries and secrets work: docs/internals.md, "Durable delivery".
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import uuid4

from sqlalchemy import bindparam, case, or_, select, text, update

from engine import jobs
from engine.jobs.kinds import DELIVER
from engine.jobs.retry import DeliverySchedule
from engine.errors import ConflictError, NotFoundError, OutboundError, OutboundRefusedError
from engine.store.db import db, is_postgres, iso, utcnow
from engine.store.models import Channel, Delivery, Job
from engine.store.paging import page_of

log = logging.getLogger("baton.delivery")

QUEUED, SENT, DEAD = "queued", "sent", "dead"
STATUSES = (QUEUED, SENT, DEAD)

TIMEOUT_S = 10.0
PARK_RECHECK_S = 3600.0   # a parked job is woken by its predecessor; this is only a safety net
HELD = jobs.HELD_UNTIL  # run_at of a dead delivery's job: kept for delivery.retry, never due

_LOCK_NAMESPACE = 0x42444C56  # first key of pg_advisory_xact_lock(int, int): "BDLV"
_PG_KEY_LOCK = text("SELECT pg_advisory_xact_lock(CAST(:namespace AS integer), hashtext(CAST(:key AS text)))")
_MAX_URL, _MAX_KEY, _MAX_EVENT = 2000, 300, 32  # the column sizes


# --- the API other modules call, inside their own transaction ------------------------------------

def message_payload(chat_id: str, text: str, timestamp: datetime) -> dict[str, Any]:
    """The web-chat message body of §4.3; ``timestamp`` is naive UTC (``utcnow()``) or aware."""
    if timestamp.tzinfo is not None:
        timestamp = timestamp.astimezone(timezone.utc).replace(tzinfo=None)
    return {"chat_id": chat_id, "text": text, "reply_to_message_id": None, "timestamp": iso(timestamp)}


def encode_body(payload: dict[str, Any]) -> str:
    """Compact JSON, non-ASCII kept as UTF-8; strict (no NaN). ValueError when it cannot be sent."""
    if not isinstance(payload, dict):
        raise ValueError("A delivery payload must be a JSON object.")
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    body.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError (a ValueError) here, not at send
    return body


def queue(tenant_id: int, *, url: str, payload: dict[str, Any], secret: str | None, ordering_key: str,
          channel_id: int | None, event: str = "message") -> Delivery:
    """Add a delivery and its ``deliver`` job to the caller's transaction (no commit here).

    The returned row has its id (flushed). ``secret`` (None or empty: unsigned) is kept only in the
    job's payload; with ``channel_id`` the channel's current secret is used instead while the
    channel exists. Raises ValueError for arguments no delivery could be made of.
    """
    body = encode_body(payload)
    for name, value, limit in (("url", url, _MAX_URL), ("ordering_key", ordering_key, _MAX_KEY),
                               ("event", event, _MAX_EVENT)):
        if not isinstance(value, str) or not value or len(value) > limit:
            raise ValueError(f"A delivery's {name} must be a non-empty string of at most {limit} characters.")
    now = utcnow()
    row = Delivery(tenant_id=tenant_id, channel_id=channel_id, ordering_key=ordering_key,
                   delivery_uid=uuid4().hex, event=event, url=url, body=body, status=QUEUED, attempts=0,
                   created_at=now, next_attempt_at=now)
    db.session.add(row)
    db.session.flush()
    job_payload: dict[str, Any] = {"delivery_id": row.id}
    if secret:
        job_payload["secret"] = secret
    jobs.enqueue(tenant_id, DELIVER, payload=job_payload, run_at=now)
    return row


def signature(secret: str, body: bytes) -> str:
    """``X-Baton-Signature``: ``sha256=`` and the hex HMAC-SHA256 of the exact body bytes."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def request_headers(delivery_uid: str, body: bytes, secret: str | None, now_s: float | None = None) -> dict[str, str]:
    headers = {"Content-Type": "application/json; charset=utf-8", "X-Baton-Delivery": delivery_uid,
               "X-Baton-Timestamp": str(int(time.time() if now_s is None else now_s))}
    if secret:
        headers["X-Baton-Signature"] = signature(secret, body)
    return headers


# --- the job handler ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Attempt:
    """What an attempt needs, copied out of the rows before the transaction ends."""

    delivery_id: int
    tenant_id: int
    ordering_key: str
    uid: str
    url: str
    body: bytes
    secret: str | None


@dataclass(frozen=True)
class _Outcome:
    result: str                      # SENT, DEAD or "retry"
    status: int | None = None
    error: str | None = None
    retry_after_s: float | None = None


class DeliveryRunner:
    """Job handler for ``deliver`` jobs: decide (short transaction), POST (none open), record."""

    def __init__(self, outbound, *, retry_scale: float = 1.0, timeout_s: float = TIMEOUT_S):
        self.outbound = outbound
        self.schedule = DeliverySchedule(retry_scale)
        self.timeout_s = float(timeout_s)

    def handle(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        attempt = self._begin(job, worker_id)
        if attempt is not None:
            self._record(job, worker_id, attempt, self._send(attempt))

    def give_up(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        """The handler itself failed again and again (not the receiver): dead, re-sendable."""
        row = db.session.get(Delivery, job.payload.get("delivery_id"))
        if row is None or row.status != QUEUED:
            jobs.finish(job, worker_id)
            db.session.commit()
            return
        _lock_key(row.ordering_key)
        db.session.refresh(row)
        self._die(job, worker_id, row, "An internal error stopped this delivery; delivery.retry re-sends it.")
        db.session.commit()

    # -- 1: may this delivery go now? --

    def _begin(self, job: jobs.ClaimedJob, worker_id: str) -> _Attempt | None:
        delivery_id = job.payload.get("delivery_id")
        key = db.session.execute(select(Delivery.ordering_key).where(Delivery.id == delivery_id)).scalar()
        if key is None:  # the row is gone: nothing to send
            jobs.finish(job, worker_id)
            db.session.commit()
            return None
        _lock_key(key)
        row = db.session.execute(select(Delivery).where(Delivery.id == delivery_id)
                                 .execution_options(populate_existing=True)).scalar_one()
        if row.status == SENT:
            jobs.finish(job, worker_id)
            db.session.commit()
            return None
        if row.status == DEAD:  # woken by mistake: keep the job (and its secret) for delivery.retry
            _put_back(job, worker_id, HELD)
            db.session.commit()
            return None
        if _head(row.tenant_id, row.ordering_key) != row.id:
            row.next_attempt_at = None  # "waiting for an earlier delivery": shown as no next attempt
            _put_back(job, worker_id, utcnow() + timedelta(seconds=PARK_RECHECK_S))
            db.session.commit()
            return None
        url, secret = row.url, job.payload.get("secret")
        if row.channel_id is not None:
            channel = db.session.execute(select(Channel.webhook_url, Channel.webhook_secret)
                                         .where(Channel.id == row.channel_id)).first()
            if channel is not None:
                secret = channel.webhook_secret
                if channel.webhook_url and channel.webhook_url != url:
                    url = row.url = channel.webhook_url
        row.attempts += 1  # counted before the call: an attempt cut short by a crash still counts
        attempt = _Attempt(row.id, row.tenant_id, row.ordering_key, row.delivery_uid, url,
                           row.body.encode("utf-8"), secret or None)
        jobs.extend_lease(job, worker_id, self.timeout_s + 30)  # commits the above with the lease
        return attempt

    # -- 2: the call, with no transaction open --

    def _send(self, attempt: _Attempt) -> _Outcome:
        headers = request_headers(attempt.uid, attempt.body, attempt.secret)
        try:
            response = self.outbound.request("POST", attempt.url, headers=headers, body=attempt.body,
                                             timeout_s=self.timeout_s)
        except OutboundRefusedError as exc:
            return _Outcome(DEAD, error=exc.message)
        except OutboundError as exc:
            return _Outcome("retry", error=exc.message)
        if response.ok:
            return _Outcome(SENT, status=response.status)
        return _Outcome("retry", status=response.status, error=f"The receiver answered {response.status}.",
                        retry_after_s=response.retry_after_s())

    # -- 3: record the outcome --

    def _record(self, job: jobs.ClaimedJob, worker_id: str, attempt: _Attempt, outcome: _Outcome) -> None:
        _lock_key(attempt.ordering_key)
        row = db.session.execute(select(Delivery).where(Delivery.id == attempt.delivery_id)
                                 .execution_options(populate_existing=True)).scalar_one_or_none()
        now = utcnow()
        if row is None:
            jobs.finish(job, worker_id)
            db.session.commit()
            return
        row.last_status = outcome.status
        if outcome.result == SENT:
            row.status, row.sent_at, row.last_error, row.next_attempt_at = SENT, now, None, None
            # Even with the lease lost (we overran it) the receiver has it: sent stays true.
            jobs.finish(job, worker_id)
            _wake_head(row.tenant_id, row.ordering_key, now)
            db.session.commit()
            return
        error = outcome.error
        if outcome.result == "retry":
            since, base = _round(job.payload, row.created_at)
            next_at = self.schedule.next_attempt(row.attempts - base, now, since, outcome.retry_after_s)
            if next_at is not None:
                if not _put_back(job, worker_id, next_at):
                    db.session.rollback()  # lease lost: the worker that took the job over records
                    return
                row.last_error, row.next_attempt_at = error, next_at
                db.session.commit()
                return
            error = f"{error} Gave up after {row.attempts - base} attempts."
        if not self._die(job, worker_id, row, error):
            db.session.rollback()
            return
        log.warning("delivery %s (%s) is dead: %s", row.id, row.delivery_uid, error)
        db.session.commit()

    def _die(self, job: jobs.ClaimedJob, worker_id: str, row: Delivery, error: str | None) -> bool:
        if not _put_back(job, worker_id, HELD):
            return False
        row.status, row.last_error, row.next_attempt_at = DEAD, error, None
        _wake_head(row.tenant_id, row.ordering_key, utcnow())  # a dead delivery stops blocking
        return True


# --- administration (delivery.list, delivery.retry) -----------------------------------------------

def list_deliveries(tenant_id: int, *, status: str | None, page: int, per_page: int) -> dict[str, Any]:
    """One page of the tenant's deliveries, newest first. Neither bodies nor secrets are shown."""
    conditions = [Delivery.tenant_id == tenant_id]
    if status is not None:
        conditions.append(Delivery.status == status)
    query = select(Delivery.id, Delivery.delivery_uid, Delivery.channel_id, Delivery.event, Delivery.url,
                   Delivery.status, Delivery.attempts, Delivery.last_status, Delivery.last_error,
                   Delivery.created_at, Delivery.next_attempt_at, Delivery.sent_at).where(*conditions)
    listed = page_of(query, Delivery.id, page=page, per_page=per_page, item=lambda r: {
        "delivery_id": r.id, "delivery_uid": r.delivery_uid, "channel_id": r.channel_id, "event": r.event,
        "url": r.url, "status": r.status, "attempts": r.attempts, "last_status": r.last_status,
        "last_error": r.last_error, "created_at": iso(r.created_at),
        "next_attempt_at": iso(r.next_attempt_at), "sent_at": iso(r.sent_at)})
    db.session.rollback()
    return listed


def retry(tenant_id: int, delivery_id: int) -> dict[str, Any]:
    """Queue a dead (or queued) delivery again, now, with a new retry round; same uid. Commits."""
    key = db.session.execute(select(Delivery.ordering_key).where(
        Delivery.tenant_id == tenant_id, Delivery.id == delivery_id)).scalar()
    if key is None:
        db.session.rollback()
        raise NotFoundError(f"Delivery {delivery_id} not found.")
    _lock_key(key)
    row = db.session.execute(select(Delivery).where(Delivery.id == delivery_id)
                             .execution_options(populate_existing=True)).scalar_one()
    if row.status == SENT:
        db.session.rollback()
        raise ConflictError(f"Delivery {delivery_id} was already sent.")
    now = utcnow()
    row.status, row.next_attempt_at = QUEUED, now
    # Its job decides again whether it may go (it may have to wait for an earlier delivery).
    _wake(tenant_id, row.id, now, new_round={"since": now.isoformat(), "base": row.attempts})
    db.session.commit()
    return {"delivery_id": delivery_id, "status": QUEUED}


# --- helpers --------------------------------------------------------------------------------------

def _lock_key(ordering_key: str) -> None:
    """Serialize, per ordering key, the transactions that decide and record (released at commit)."""
    if is_postgres():
        db.session.execute(_PG_KEY_LOCK, {"namespace": _LOCK_NAMESPACE, "key": ordering_key})
    # SQLite: every transaction began with BEGIN IMMEDIATE, so it holds the database's write lock.


def _head(tenant_id: int, ordering_key: str) -> int | None:
    """The id of the delivery of this key that may go next, or None when none is queued."""
    return db.session.execute(
        select(Delivery.id).where(Delivery.tenant_id == tenant_id, Delivery.ordering_key == ordering_key,
                                  Delivery.status == QUEUED)
        .order_by(case((Delivery.attempts > 0, 0), else_=1), Delivery.id).limit(1)).scalar()


def _round(job_payload: dict[str, Any], created_at: datetime) -> tuple[datetime, int]:
    """When the current retry round began and the attempts made before it."""
    since = job_payload.get("since")
    return (datetime.fromisoformat(since) if since else created_at), int(job_payload.get("base") or 0)


_put_back_statement = (
    update(Job).where(Job.id == bindparam("job_id"), Job.locked_by == bindparam("worker_id"))
    .values(run_at=bindparam("run_at"), locked_by=None, locked_until=None, attempts=0, last_error=None))


def _put_back(job: jobs.ClaimedJob, worker_id: str, run_at: datetime) -> bool:
    """Give the job back until ``run_at`` inside the current transaction; False if the lease was lost.

    Unlike ``jobs.release`` it does not commit (the delivery's new state commits with it) and it
    resets the job's attempts: those count the handler's own failures (WorkerPool gives up after a
    few), while the delivery counts the receiver's.
    """
    result = db.session.execute(_put_back_statement.execution_options(synchronize_session=False),
                                {"job_id": job.id, "worker_id": worker_id, "run_at": run_at})
    return result.rowcount == 1


def _wake_head(tenant_id: int, ordering_key: str, now: datetime) -> None:
    head = _head(tenant_id, ordering_key)
    if head is not None:
        _wake(tenant_id, head, now)


def _wake(tenant_id: int, delivery_id: int, now: datetime, new_round: dict[str, Any] | None = None) -> None:
    """Make the delivery's job due now (unless a worker holds it right now); workers are woken at commit."""
    job = db.session.execute(
        select(Job.id, Job.payload).where(Job.kind == DELIVER, Job.tenant_id == tenant_id,
                                          Job.payload["delivery_id"].as_integer() == delivery_id)
        .order_by(Job.id).limit(1)).first()
    if job is None:  # not expected (a delivery keeps its job until sent); make one
        jobs.enqueue(tenant_id, DELIVER, payload={"delivery_id": delivery_id, **(new_round or {})}, run_at=now)
        return
    values: dict[str, Any] = {"run_at": now}
    if new_round:
        values["payload"] = {**job.payload, **new_round}
    db.session.execute(update(Job).where(Job.id == job.id, or_(Job.locked_until.is_(None), Job.locked_until < now))
                       .values(**values).execution_options(synchronize_session=False))
    jobs.wake_at_commit(DELIVER)  # moving a parked job's run_at must wake the workers too
