"""Fast drain: when a delivery to a destination succeeds, its other deliveries waiting out a retry
delay are made due now, in the transaction that records the success.

Without it each delivery of an outage waits out its own schedule (the attempt after 2 min is at
10 min): the receiver is back, but a customer waits ten minutes for an answer that could go out at
once. A success is the evidence that the destination takes deliveries again.

The **destination** is the channel (``channel_id``: a web-chat receiver, a messenger bot's API) or,
for a channel-less delivery (headless task events), its URL; always within one tenant. Only the
job's due time moves: whether a delivery may go is still decided by its job under its ordering
key's lock (``delivery.head``), so the per-chat order holds whatever is woken. Not woken:

* a delivery whose receiver asked for a pause (``Retry-After``, a messenger's rate limit): the
  job's payload carries ``not_before`` and a drain never brings the attempt earlier than that;
* a delivery whose last failed attempt was itself brought forward by a drain (payload
  ``drained_at`` = its attempts then): a message the receiver refuses while it takes others
  (a poison message) gets at most one extra attempt per scheduled one, not one per success;
* a job a worker holds right now (it is being attempted).

docs/internals.md, "Durable delivery", has the rule and why order holds.
"""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select, update

from engine import jobs
from engine.jobs.kinds import DELIVER
from engine.store.db import db, is_postgres
from engine.store.models import Delivery, Job

QUEUED = "queued"
DRAIN_LIMIT = 500   # deliveries brought forward by one success; the next success takes the rest


def drain(sent: Delivery, now: datetime) -> int:
    """In the caller's transaction (which records ``sent`` as sent): make the destination's other
    deliveries that wait out a retry delay due ``now``. Returns how many were brought forward.

    Rows another transaction holds (PostgreSQL ``SKIP LOCKED``) are skipped, never waited for: that
    transaction is attempting, retrying or draining them already, and no two drains can deadlock.
    """
    waiting = select(Delivery.id, Delivery.attempts).where(
        Delivery.tenant_id == sent.tenant_id, Delivery.status == QUEUED, Delivery.id != sent.id,
        Delivery.attempts > 0, Delivery.next_attempt_at > now, *_same_destination(sent),
    ).order_by(Delivery.id).limit(DRAIN_LIMIT)
    if is_postgres():
        waiting = waiting.with_for_update(skip_locked=True)
    attempts = dict(db.session.execute(waiting).all())
    if not attempts:
        return 0
    candidates = select(Job.id, Job.payload).where(
        Job.kind == DELIVER, Job.tenant_id == sent.tenant_id, Job.run_at > now,
        or_(Job.locked_until.is_(None), Job.locked_until < now),
        Job.payload["delivery_id"].as_integer().in_(list(attempts)))
    if is_postgres():
        candidates = candidates.with_for_update(skip_locked=True)
    woken = []
    for job_id, payload in db.session.execute(candidates).all():
        delivery_id = payload.get("delivery_id")
        if not _may_bring_forward(payload, attempts[delivery_id], now):
            continue
        db.session.execute(update(Job).where(Job.id == job_id)
                           .values(run_at=now, payload={**payload, "drained_at": attempts[delivery_id]})
                           .execution_options(synchronize_session=False))
        woken.append(delivery_id)
    if woken:
        db.session.execute(update(Delivery).where(Delivery.id.in_(woken)).values(next_attempt_at=now)
                           .execution_options(synchronize_session=False))
        jobs.wake_at_commit(DELIVER)
    return len(woken)


def _same_destination(sent: Delivery):
    if sent.channel_id is not None:
        return (Delivery.channel_id == sent.channel_id,)
    return (Delivery.channel_id.is_(None), Delivery.url == sent.url)


def _may_bring_forward(payload: dict, attempts: int, now: datetime) -> bool:
    not_before = payload.get("not_before")
    if not_before and datetime.fromisoformat(not_before) > now:
        return False  # the receiver asked for this pause
    return payload.get("drained_at") != attempts - 1  # its last failure was a drained attempt


def not_before(payload: dict, until: datetime) -> dict:
    """The job payload of a delivery whose receiver asked not to be called again before ``until``."""
    return {**payload, "not_before": until.isoformat()}
