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

from datetime import datetime, timedelta

from sqlalchemy import bindparam, or_, select, update

from engine.jobs.kinds import DELIVER
from engine.outbound import delivery
from engine.store.db import is_postgres
from engine.store.models import Delivery, Job
from engine.store.unit_of_work import UnitOfWork

QUEUED = "queued"
DRAIN_LIMIT = 500   # deliveries brought forward by one success; the next success takes the rest


def drain(uow: UnitOfWork, sent, now: datetime) -> int:
    """In the caller's transaction (which records ``sent``, the delivery's columns, as sent): make
    the destination's other deliveries that wait out a retry delay due ``now``. Returns how many
    were brought forward.

    Rows another transaction holds (PostgreSQL ``SKIP LOCKED``) are skipped, never waited for: that
    transaction is attempting, retrying or draining them already, and no two drains can deadlock.
    """
    postgres = is_postgres()
    waiting = _WAITING[(sent.channel_id is not None, postgres)]
    attempts = dict(uow.run(waiting, {
        "tenant_id": sent.tenant_id, "sent_id": sent.id, "now": now, "channel_id": sent.channel_id,
        "url": sent.url}).all())
    if not attempts:  # the common case: every success asks, and usually nothing waits
        return 0
    candidates = select(Job.id, Job.payload).where(
        Job.kind == DELIVER, Job.tenant_id == sent.tenant_id, Job.run_at > now,
        or_(Job.locked_until.is_(None), Job.locked_until < now),
        Job.payload["delivery_id"].as_integer().in_(list(attempts)))
    if is_postgres():
        candidates = candidates.with_for_update(skip_locked=True)
    woken = []
    for job_id, payload in uow.execute(candidates).all():
        delivery_id = payload.get("delivery_id")
        if not _may_bring_forward(payload, attempts[delivery_id], now):
            continue
        uow.execute(update(Job).where(Job.id == job_id)
                           .values(run_at=now, payload={**payload, "drained_at": attempts[delivery_id]})
                           .execution_options(synchronize_session=False))
        woken.append(delivery_id)
    if woken:
        uow.execute(update(Delivery).where(Delivery.id.in_(woken)).values(next_attempt_at=now)
                           .execution_options(synchronize_session=False))
        uow.ready(DELIVER)
    return len(woken)


def _same_destination(by_channel: bool) -> tuple:
    """A channel, or for a channel-less delivery its URL (always within the tenant)."""
    return ((Delivery.channel_id == bindparam("channel_id"),) if by_channel else
            (Delivery.channel_id.is_(None), Delivery.url == bindparam("url")))


def _waiting(by_channel: bool, postgres: bool):
    """The deliveries of the sent one's destination that wait out a retry delay (built once per
    kind of destination and dialect: ``drain`` runs at every success)."""
    waiting = select(Delivery.id, Delivery.attempts).where(
        Delivery.tenant_id == bindparam("tenant_id"), Delivery.status == QUEUED, Delivery.id != bindparam("sent_id"),
        Delivery.attempts > 0, Delivery.next_attempt_at > bindparam("now"), *_same_destination(by_channel),
    ).order_by(Delivery.id).limit(DRAIN_LIMIT)
    return waiting.with_for_update(skip_locked=True) if postgres else waiting


_WAITING = {(by_channel, postgres): _waiting(by_channel, postgres) for by_channel in (True, False)
            for postgres in (True, False)}


def _may_bring_forward(payload: dict, attempts: int, now: datetime) -> bool:
    not_before = payload.get("not_before")
    if not_before and datetime.fromisoformat(not_before) > now:
        return False  # the receiver asked for this pause
    return payload.get("drained_at") != attempts - 1  # its last failure was a drained attempt


def takes_the_probe(uow: UnitOfWork, row, now: datetime, probe_window: timedelta, up_window: timedelta) -> bool:
    """Whether ``row`` (a queued delivery that has just failed) is the one that probes its destination
    (``DeliveryRunner._probe_sooner``): no other delivery of the destination will be tried within
    ``probe_window`` (none on the wire, none due sooner), and the destination took none within
    ``up_window``. Decided under the destination's lock (PostgreSQL; SQLite's write lock serializes
    anyway), so of a wave of failures recorded together, by any worker in any order, exactly one
    (the last recorded) probes. A destination that takes other deliveries is up: a message it
    refuses keeps its schedule (a poison message)."""
    by_channel = row.channel_id is not None
    # After the ordering key's lock (the runner's _record took it), never before: one order, no deadlock.
    delivery.lock_key(uow, f"{row.tenant_id}|{row.channel_id}" if by_channel else f"{row.tenant_id}|{row.url}",
                      namespace=_PROBE_LOCK_NAMESPACE)
    params = {"tenant_id": row.tenant_id, "channel_id": row.channel_id, "url": row.url, "delivery_id": row.id,
              "soon": now + probe_window, "since": now - up_window}
    if uow.run(_ANOTHER_TRIED_SOON[by_channel], params).first() is not None:
        return False
    return uow.run(_RECENTLY_SENT[by_channel], params).first() is None


_PROBE_LOCK_NAMESPACE = 0x42505242  # "BPRB": destinations, apart from the ordering keys' namespace


def _another_tried_soon(by_channel: bool):
    """Another attempted delivery of the destination that is on the wire or due within the window
    (an attempt in flight still shows the due time it was claimed at, in the past)."""
    return select(Delivery.id).where(Delivery.tenant_id == bindparam("tenant_id"), Delivery.status == QUEUED,
                                     Delivery.attempts > 0, Delivery.id != bindparam("delivery_id"),
                                     Delivery.next_attempt_at <= bindparam("soon"),
                                     *_same_destination(by_channel)).limit(1)


def _recently_sent(by_channel: bool):
    return select(Delivery.id).where(Delivery.tenant_id == bindparam("tenant_id"), Delivery.status == "sent",
                                     Delivery.sent_at > bindparam("since"), *_same_destination(by_channel)).limit(1)


_ANOTHER_TRIED_SOON = {by_channel: _another_tried_soon(by_channel) for by_channel in (True, False)}
_RECENTLY_SENT = {by_channel: _recently_sent(by_channel) for by_channel in (True, False)}


def not_before(payload: dict, until: datetime) -> dict:
    """The job payload of a delivery whose receiver asked not to be called again before ``until``."""
    return {**payload, "not_before": until.isoformat()}
