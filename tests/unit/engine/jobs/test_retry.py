"""The retry policy (``engine.jobs.retry``): the delivery schedule, failing jobs, HTTP tasks."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from engine.jobs.retry import DeliverySchedule as RetrySchedule

T0 = datetime(2026, 11, 22, 10, 0, 0)


def test_delays_grow_5s_30s_2min_10min_1h_then_hourly():
    schedule = RetrySchedule()
    assert [schedule.delay_after(n) for n in range(1, 9)] == [5, 30, 120, 600, 3600, 3600, 3600, 3600]


def test_attempts_stop_24_hours_after_the_round_began():
    schedule, at, attempts = RetrySchedule(), T0, 1
    while (next_at := schedule.next_attempt(attempts, at, since=T0)) is not None:
        at, attempts = next_at, attempts + 1
    assert at <= T0 + timedelta(hours=24) < at + timedelta(hours=1)
    # 0 s, 5 s, 35 s, 2 min 35 s, 12 min 35 s, 1 h 12 min 35 s, then hourly up to 23 h 12 min 35 s
    assert attempts == 6 + 22
    assert at == T0 + timedelta(hours=23, minutes=12, seconds=35)


def test_the_scale_shrinks_delays_and_window_alike():
    schedule = RetrySchedule(0.01)
    assert schedule.delay_after(1) == pytest.approx(0.05)
    assert schedule.delay_after(7) == pytest.approx(36.0)
    assert schedule.next_attempt(7, T0 + timedelta(seconds=850), since=T0) is None
    assert schedule.next_attempt(7, T0 + timedelta(seconds=800), since=T0) == T0 + timedelta(seconds=836)
    with pytest.raises(ValueError):
        RetrySchedule(0)


def test_retry_after_wins_only_when_longer_and_is_not_scaled():
    schedule = RetrySchedule(0.001)
    assert schedule.next_attempt(1, T0, since=T0, retry_after_s=2.0) == T0 + timedelta(seconds=2)
    assert schedule.next_attempt(4, T0, since=T0, retry_after_s=0.1) == T0 + timedelta(seconds=0.6)
    # A Retry-After past the end of the window makes that attempt the last one.
    assert RetrySchedule().next_attempt(1, T0, since=T0, retry_after_s=25 * 3600) is None


def test_a_failing_job_waits_twice_as_long_each_time_up_to_a_minute():
    from engine.jobs.retry import job_backoff

    assert [job_backoff(n) for n in (1, 2, 3, 5, 6, 20)] == [2.0, 4.0, 8.0, 32.0, 60.0, 60.0]


def test_an_http_task_waits_four_times_longer_each_time_and_honours_a_longer_retry_after():
    from engine.jobs.retry import http_task_delay

    assert [http_task_delay(n, 5.0, None) for n in (1, 2, 3, 4, 5)] == [5.0, 20.0, 80.0, 320.0, 600.0]
    assert http_task_delay(1, 5.0, 90.0) == 90.0 and http_task_delay(3, 5.0, 10.0) == 80.0
