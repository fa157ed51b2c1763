"""The ``deliver`` job's handler: may this delivery go now (a unit of work), send it (none open),
record what came of it (another unit of work).

Two kinds of delivery: a signed JSON POST to a URL (web-chat answers, CRM events), and a call
through a channel's own API (a messenger: its ``url`` names the API method). The second is
prepared and judged by the ``ChannelCalls`` given to the runner (``engine.chat.messenger_deliveries``),
which reads the channel's current credentials and the messenger's answer; this module stays the
one owner of ordering, retries and the dead letter for both. Why it is built this way:
docs/internals.md, "Durable delivery".
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import bindparam, select, update

from engine import jobs
from engine.errors import OutboundError, OutboundRefusedError
from engine.jobs.retry import DeliverySchedule
from engine.outbound import delivery, delivery_drain
from engine.outbound.delivery import DEAD, HELD, QUEUED, SENT
from engine.store import sealing, writes
from engine.store.db import utcnow
from engine.store.models import Channel, Delivery
from engine.store.unit_of_work import UnitOfWork
from engine.telemetry import metrics

log = logging.getLogger("baton.delivery")

TIMEOUT_S = 10.0
LEASE_MARGIN_S = 30.0     # beyond a call's timeout, its job's lease (BATON_JOB_LEASE_S in the app)
PROBE_S = 15.0            # a destination with deliveries waiting out a delay is tried this often (its oldest)
PARK_RECHECK_S = 3600.0   # a parked job is woken by its predecessor; this is only a safety net
RETRY, WAIT = "retry", "wait"
SLOT = "slot"   # a job payload's reserved send time (``ChannelCalls.prepare``): one decision's, dropped on a retry


@dataclass(frozen=True)
class ChannelCall:
    """A delivery sent through a channel's own API, ready to go; the URL may carry a token: never log it."""

    channel_type: str
    method: str
    url: str = field(repr=False)
    headers: dict[str, str] = field(repr=False)
    body: bytes = field(repr=False)
    not_before: datetime | None = None      # a paced call waits for its slot (naive UTC) before it goes


@dataclass(frozen=True)
class Later:
    """A channel call that may not go yet (its slot is further than a call thread should wait): the
    job sleeps until ``at`` with ``payload`` merged into its own, and no attempt is counted."""

    at: datetime
    payload: dict = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptResult:
    """What one attempt came to: ``result`` is SENT, DEAD, RETRY (on the schedule) or WAIT (after
    ``retry_after_s``, not counted against the schedule); ``external_id`` is the receiver's id of it;
    ``failure``: why a dead one can never go, in the words a process hears (``delivery_failed``)."""

    result: str
    status: int | None = None
    error: str | None = None
    retry_after_s: float | None = None
    external_id: str | None = None
    failure: str | None = None
    whole_bot: bool = True      # a WAIT that holds every call of the channel (a 429), not only this chat's
    answered_at: datetime | None = None     # when a channel call's answer came back (pacing counts from it)


class ChannelCalls(Protocol):
    """How deliveries through a channel's own API are prepared and judged (``engine.chat``)."""

    def handles(self, url: str) -> bool:
        """Whether a delivery with this ``url`` is a channel call rather than a POST to it."""

    def prepare(self, uow, row, job_payload: dict) -> ChannelCall | AttemptResult | Later | str:
        """Inside the deciding unit of work (``row``: the delivery's columns, a Row): the call with
        the channel's current credentials (and the moment it may go); or an outcome reached without
        a call (dead: the channel is gone, the customer blocked the bot ...; sent: nothing needs to
        go); or ``Later`` (paced); or why it can never be sent (dead at once)."""

    def judge(self, call: ChannelCall, response) -> AttemptResult:
        """The outcome of an answer, read from its body the messenger's way."""

    def recorded(self, uow, row, outcome: AttemptResult) -> None:
        """Inside the recording unit of work: note a failure on the channel (its last error)."""

    def died(self, uow, row, error: str | None, failure: str | None) -> None:
        """Inside the unit of work that made the delivery dead: tell whoever waits for it."""


@dataclass(frozen=True)
class _Attempt:
    """What an attempt needs, copied out of the rows before the transaction ends."""

    delivery_id: int
    tenant_id: int
    ordering_key: str
    uid: str
    url: str = field(repr=False)
    body: bytes = field(repr=False)
    secret: str | None = field(repr=False)
    call: ChannelCall | None = None


# The runner's statements, built once, Core on the session's connection: a delivery's two
# transactions (decide, record) are on the path of every chat answer, and the ORM's entity loading,
# unit of work and per-call expression building cost more CPU than these few rows (about 1.5 ms
# of the 2 ms of each transaction on SQLite). A Row of _ROW's columns stands for the delivery.
_deliveries, _channels = Delivery.__table__, Channel.__table__
_KEY = select(_deliveries.c.ordering_key).where(_deliveries.c.id == bindparam("delivery_id"))
_ROW = select(_deliveries.c.id, _deliveries.c.tenant_id, _deliveries.c.channel_id, _deliveries.c.ordering_key,
              _deliveries.c.delivery_uid, _deliveries.c.url, _deliveries.c.body, _deliveries.c.status,
              _deliveries.c.attempts, _deliveries.c.created_at).where(_deliveries.c.id == bindparam("delivery_id"))
_CHANNEL_WEBHOOK = select(_channels.c.webhook_url, _channels.c.webhook_secret).where(
    _channels.c.id == bindparam("channel_id"))
_THIS = _deliveries.c.id == bindparam("delivery_id")
# Counted before the call (an attempt cut short by a crash still counts), with the URL it goes to;
# its next attempt is "now" while it is on the wire (a woken parked delivery had none).
_ATTEMPTED = update(_deliveries).where(_THIS).values(attempts=_deliveries.c.attempts + 1, url=bindparam("to_url"),
                                                     next_attempt_at=bindparam("now"))
_PARKED = update(_deliveries).where(_THIS).values(next_attempt_at=None)  # "waiting for an earlier delivery"
_SENT = update(_deliveries).where(_THIS).values(
    status=SENT, sent_at=bindparam("now"), last_error=None, next_attempt_at=None,
    external_id=bindparam("new_external_id"), last_status=bindparam("new_last_status"))
_RETRYING = update(_deliveries).where(_THIS).values(
    last_error=bindparam("new_last_error"), next_attempt_at=bindparam("next_at"),
    last_status=bindparam("new_last_status"))
_DEAD = update(_deliveries).where(_THIS).values(
    status=DEAD, last_error=bindparam("new_last_error"), next_attempt_at=None)
_NOTED = update(_deliveries).where(_THIS).values(last_status=bindparam("new_last_status"))


class DeliveryRunner:
    """Job handler for ``deliver`` jobs: decide (a unit of work), send (none open), record (another)."""

    def __init__(self, outbound, *, retry_scale: float = 1.0, timeout_s: float = TIMEOUT_S,
                 channel_calls: ChannelCalls | None = None, probe_s: float = PROBE_S,
                 lease_s: float = LEASE_MARGIN_S):
        self.outbound = outbound
        self.lease_s = float(lease_s)  # beyond the call's timeout, its job's lease (BATON_JOB_LEASE_S)
        self.schedule = DeliverySchedule(retry_scale)
        self.probe_s = float(probe_s)
        self.timeout_s = float(timeout_s)
        self.channel_calls = channel_calls

    def handle(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> jobs.Then | None:
        attempt = self._begin(uow, job, worker_id)
        if attempt is None:
            return None
        return jobs.Then(call=lambda: self._send(attempt),
                         step=lambda uow, outcome: self._record(uow, job, worker_id, attempt, outcome))

    def give_up(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        """The handler itself failed again and again (not the receiver): dead, re-sendable."""
        row = _locked_row(uow, job.payload.get("delivery_id"))
        if row is None or row.status != QUEUED:
            jobs.finish(uow, job, worker_id)
            return
        error = "An internal error stopped this delivery; delivery.retry re-sends it."
        _die(uow, job, worker_id, row, error)
        self._died(uow, row, error, None)
        uow.after_commit(metrics.DELIVERIES_DEAD.inc)

    # -- 1: may this delivery go now? --

    def _begin(self, uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str) -> _Attempt | None:
        row = _locked_row(uow, job.payload.get("delivery_id"))
        if row is None or row.status == SENT:  # the row is gone, or it went: nothing to send
            jobs.finish(uow, job, worker_id)
            return None
        if row.status == DEAD:  # woken by mistake: keep the job (and its secret) for delivery.retry
            delivery.put_back(uow, job, worker_id, HELD)
            return None
        if delivery.head(uow, row.tenant_id, row.ordering_key) != row.id:
            uow.run(_PARKED, {"delivery_id": row.id})  # "waiting for an earlier delivery": no next attempt shown
            delivery.put_back(uow, job, worker_id, utcnow() + timedelta(seconds=PARK_RECHECK_S))
            return None
        if self.channel_calls is not None and self.channel_calls.handles(row.url):
            call = self.channel_calls.prepare(uow, row, job.payload)
            if isinstance(call, Later):  # paced: back to sleep until its slot, no attempt counted
                if not delivery.put_back(uow, job, worker_id, call.at, {**job.payload, **call.payload}):
                    raise writes.Lost()
                return None
            if isinstance(call, str):  # it can never go: dead now, without a call
                call = AttemptResult(DEAD, error=call)
            if isinstance(call, AttemptResult):  # decided without a call (dead, or nothing to send)
                self._record_now(uow, job, worker_id, row, call)
                return None
            attempt = _Attempt(row.id, row.tenant_id, row.ordering_key, row.delivery_uid, "", b"", None, call)
        else:
            attempt = _post_attempt(uow, job, row)
        # Counted before the call: an attempt cut short by a crash still counts.
        uow.run(_ATTEMPTED, {"delivery_id": row.id, "to_url": attempt.url or row.url, "now": utcnow()})
        # Committed with the above, before the call: a worker killed on the wire keeps the job from the
        # next one for the call's timeout and one lease more.
        jobs.extend_lease(uow, job, worker_id, self.timeout_s + self.lease_s)
        return attempt

    # -- 2: the call, with no unit of work open --

    def _send(self, attempt: _Attempt) -> AttemptResult:
        call = attempt.call
        try:
            if call is not None:
                if call.not_before is not None:
                    wait_s = (call.not_before - utcnow()).total_seconds()
                    if wait_s > 0:
                        time.sleep(wait_s)
                response = self.outbound.request(call.method, call.url, headers=call.headers, body=call.body,
                                                 timeout_s=self.timeout_s)
                return replace(self.channel_calls.judge(call, response), answered_at=utcnow())
            headers = delivery.request_headers(attempt.uid, attempt.body, attempt.secret)
            response = self.outbound.request("POST", attempt.url, headers=headers, body=attempt.body,
                                             timeout_s=self.timeout_s)
        except OutboundRefusedError as exc:
            return AttemptResult(DEAD, error=exc.message)
        except OutboundError as exc:
            return AttemptResult(RETRY, error=exc.message)
        if response.ok:
            return AttemptResult(SENT, status=response.status)
        return AttemptResult(RETRY, status=response.status, error=f"The receiver answered {response.status}.",
                       retry_after_s=response.retry_after_s())

    # -- 3: record the outcome --

    def _record(self, uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, attempt: _Attempt,
                outcome: AttemptResult) -> None:
        delivery.lock_key(uow, attempt.ordering_key)
        row = uow.run(_ROW, {"delivery_id": attempt.delivery_id}).first()
        if row is None:
            jobs.finish(uow, job, worker_id)
            return
        self._record_now(uow, job, worker_id, row, outcome)

    def _record_now(self, uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, row, outcome: AttemptResult) -> None:
        """Record ``outcome`` on the locked ``row`` (``_ROW``); ``writes.Lost`` when the lease was
        lost (the worker that took the job over records)."""
        now = utcnow()
        if self.channel_calls is not None and self.channel_calls.handles(row.url):
            self.channel_calls.recorded(uow, row, outcome)
        if outcome.result == SENT:
            uow.run(_SENT, {"delivery_id": row.id, "now": now, "new_external_id": outcome.external_id,
                            "new_last_status": outcome.status})
            # Even with the lease lost (we overran it) the receiver has it: sent stays true.
            jobs.finish(uow, job, worker_id)
            delivery.wake_head(uow, row.tenant_id, row.ordering_key, now)
            delivery_drain.drain(uow, row, now)  # the destination is back: its waiting deliveries go now
            latency_s = (now - row.created_at).total_seconds()
            uow.after_commit(lambda: _counted(SENT, latency_s))
            return
        error, failure = outcome.error, outcome.failure
        if outcome.result in (RETRY, WAIT):
            since, base = delivery.round_of(job.payload, row.created_at)
            if outcome.result == WAIT:
                # The receiver asked to wait (a rate limit): this attempt does not move the schedule on.
                next_at, payload = self.schedule.wait_until(now, since, outcome.retry_after_s or 0.0), \
                    {**job.payload, "since": since.isoformat(), "base": base + 1}
            else:
                next_at, payload = self.schedule.next_attempt(row.attempts - base, now, since,
                                                              outcome.retry_after_s), None
            if outcome.retry_after_s:  # the receiver's own pause: a drain does not cut it short
                payload = delivery_drain.not_before(payload or job.payload,
                                                    now + timedelta(seconds=outcome.retry_after_s))
            if SLOT in (payload or job.payload):  # the next attempt is paced afresh
                payload = {key: value for key, value in (payload or job.payload).items() if key != SLOT}
            if next_at is not None:
                next_at = self._probe_sooner(uow, row, now, next_at, outcome.retry_after_s)
                if not delivery.put_back(uow, job, worker_id, next_at, payload):
                    raise writes.Lost()  # lease lost: the worker that took the job over records
                uow.run(_RETRYING, {"delivery_id": row.id, "new_last_error": error, "next_at": next_at,
                                    "new_last_status": outcome.status})
                uow.after_commit(lambda: _counted(outcome.result))
                return
            error, failure = f"{error} Gave up after {row.attempts - base} attempts.", "unreachable"
        uow.run(_NOTED, {"delivery_id": row.id, "new_last_status": outcome.status})
        _die(uow, job, worker_id, row, error)
        self._died(uow, row, error, failure)
        uow.after_commit(lambda: (log.warning("delivery %s (%s) is dead: %s", row.id, row.delivery_uid, error),
                                  _counted(DEAD)))

    def _died(self, uow: UnitOfWork, row, error: str | None, failure: str | None) -> None:
        if self.channel_calls is not None and self.channel_calls.handles(row.url):
            self.channel_calls.died(uow, row, error, failure)


    def _probe_sooner(self, uow: UnitOfWork, row, now, next_at, retry_after_s: float | None):
        """The recovery probe: while a destination is down, one of its failing deliveries is tried
        again within ``probe_s`` (never before the receiver's ``Retry-After``), whatever its schedule
        says, so that its success, and the drain it starts, come within seconds of the receiver's
        return. One per destination, whichever worker holds it (``delivery_drain.takes_the_probe``)."""
        probe_at = now + timedelta(seconds=max(self.probe_s, retry_after_s or 0.0))
        if probe_at >= next_at or not delivery_drain.takes_the_probe(
                uow, row, now, probe_window=timedelta(seconds=self.probe_s),
                up_window=timedelta(seconds=4 * self.probe_s)):
            return next_at
        return probe_at


def _locked_row(uow: UnitOfWork, delivery_id):
    """The delivery's row (``_ROW``), read under its ordering key's lock; None when it is gone."""
    key = uow.run(_KEY, {"delivery_id": delivery_id}).scalar()
    if key is None:
        return None
    delivery.lock_key(uow, key)
    return uow.run(_ROW, {"delivery_id": delivery_id}).first()


def _post_attempt(uow: UnitOfWork, job: jobs.ClaimedJob, row) -> _Attempt:
    """A signed POST: to the channel's current webhook URL with its current secret, if it has one."""
    url, secret = row.url, sealing.open_sealed(job.payload.get("secret"))
    if row.channel_id is not None and url.startswith(("http://", "https://")):
        channel = uow.run(_CHANNEL_WEBHOOK, {"channel_id": row.channel_id}).first()
        if channel is not None:
            secret = channel.webhook_secret
            if channel.webhook_url:
                url = channel.webhook_url  # stored on the row with the attempt
    return _Attempt(row.id, row.tenant_id, row.ordering_key, row.delivery_uid, url,
                    row.body.encode("utf-8"), secret or None)


def _die(uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, row, error: str | None) -> None:
    """Dead, its job kept for ``delivery.retry``; ``writes.Lost`` when the lease was lost."""
    if not delivery.put_back(uow, job, worker_id, HELD):
        raise writes.Lost()
    uow.run(_DEAD, {"delivery_id": row.id, "new_last_error": error})
    delivery.wake_head(uow, row.tenant_id, row.ordering_key, utcnow())  # a dead delivery stops blocking


def _counted(result: str, latency_s: float | None = None) -> None:
    """The metrics of a recorded attempt (sent, retry, wait or dead), after its commit."""
    metrics.DELIVERY_ATTEMPTS.labels(result).inc()
    if result == DEAD:
        metrics.DELIVERIES_DEAD.inc()
    elif latency_s is not None:
        metrics.DELIVERY_LATENCY.observe(max(0.0, latency_s))
