"""Every retry schedule, in one place: how long to wait before trying again.

* ``job_backoff``: a job whose handler raised (a bug, a database hiccup): 2, 4, 8 ... s, capped
  at a minute; the worker gives up after a few attempts (``MAX_ATTEMPTS``).
* ``http_task_delay``: an HTTP service task whose call failed in a retryable way: growing delays
  from ``BATON_HTTP_RETRY_BASE_S`` (base, 4x, 16x ... capped at 10 min).
* ``external_retry_at``: an external task whose worker reported a failure with retries left is
  fetchable again after the worker's ``retry_timeout_ms`` (at most a week).
* ``DeliverySchedule``: a signed delivery the receiver did not take: about 5 s, 30 s, 2 min,
  10 min, 1 h, then hourly while within 24 h of the round's start (docs/api.md, "Outbound deliveries").
  A messenger that asks to wait (a rate limit) is waited for without moving on the schedule, still
  within the round's 24 h (``wait_until``).

A server's ``Retry-After`` wins whenever it asks for longer.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

MAX_ATTEMPTS = 5          # a job's handler failing this often: its handler's give_up ends it
JOB_BACKOFF_CAP_S = 60.0
HTTP_TASK_DELAY_CAP_S = 600.0
DELIVERY_DELAYS_S = (5.0, 30.0, 120.0, 600.0, 3600.0)   # after the 1st, 2nd, ... failed attempt
DELIVERY_HOURLY_S = 3600.0                              # after that, until the window ends
DELIVERY_WINDOW_S = 24 * 3600.0


EXTERNAL_RETRY_MAX_MS = 7 * 24 * 3600 * 1000


def external_retry_at(now: datetime, retry_timeout_ms: int) -> datetime:
    """When an external task a worker failed (with retries left) may be fetched again."""
    return now + timedelta(milliseconds=min(max(retry_timeout_ms, 0), EXTERNAL_RETRY_MAX_MS))


def job_backoff(attempts: int) -> float:
    """Seconds before a failed job is tried again, after its ``attempts``-th attempt."""
    return min(2.0 ** attempts, JOB_BACKOFF_CAP_S)


def http_task_delay(attempt: int, base_s: float, retry_after_s: float | None) -> float:
    """Seconds before an HTTP task calls again after its ``attempt``-th failed call (1-based)."""
    delay = min(base_s * 4 ** (attempt - 1), HTTP_TASK_DELAY_CAP_S)
    return max(delay, retry_after_s or 0.0)


@dataclass(frozen=True)
class DeliverySchedule:
    """The delivery schedule; ``scale`` multiplies it (``BATON_DELIVERY_RETRY_SCALE``: tests use tiny
    values), except ``Retry-After``, which is the receiver's own wish."""

    scale: float = 1.0

    def __post_init__(self):
        if not self.scale > 0:
            raise ValueError("The delivery retry scale must be positive.")

    def delay_after(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th failed attempt of a round (1-based)."""
        base = DELIVERY_DELAYS_S[attempt - 1] if attempt <= len(DELIVERY_DELAYS_S) else DELIVERY_HOURLY_S
        return base * self.scale

    def next_attempt(self, attempt: int, now: datetime, since: datetime,
                     retry_after_s: float | None = None) -> datetime | None:
        """When to try again after the ``attempt``-th failure, or None: that was the last attempt."""
        delay = max(self.delay_after(attempt), retry_after_s or 0.0)
        at = now + timedelta(seconds=delay)
        return at if at <= since + timedelta(seconds=DELIVERY_WINDOW_S * self.scale) else None

    def wait_until(self, now: datetime, since: datetime, wait_s: float) -> datetime | None:
        """When to try again after the receiver asked to wait ``wait_s`` (not scaled: its own wish),
        or None when that is past the round's window."""
        at = now + timedelta(seconds=max(0.0, wait_s))
        return at if at <= since + timedelta(seconds=DELIVERY_WINDOW_S * self.scale) else None
