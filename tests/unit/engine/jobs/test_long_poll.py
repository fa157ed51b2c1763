"""engine.jobs.wakers.LongPoll: a waiting request wakes when this process commits new external
tasks, not for other work; without one it waits at most a poll interval; only ``limit`` wait."""
from __future__ import annotations

import threading
import time
from collections import Counter

from engine.jobs.wakers import EXTERNAL_TASKS, LongPoll, Wakers


def test_a_commit_that_opens_external_tasks_wakes_the_waiters_at_once():
    poll, wakers = LongPoll(limit=2, poll_s=10.0), Wakers()
    wakers.add(poll)
    seen = poll.generation()
    threading.Timer(0.2, lambda: wakers(Counter({"start": 1}))).start()           # not for it
    threading.Timer(0.4, lambda: wakers(Counter({EXTERNAL_TASKS: 1}))).start()
    began = time.monotonic()
    poll.wait(seen, 5.0)
    assert 0.35 < time.monotonic() - began < 2.0
    assert poll.generation() == seen + 1


def test_without_a_ring_it_waits_the_shorter_of_the_time_left_and_the_poll_interval():
    poll = LongPoll(limit=1, poll_s=0.3)
    began = time.monotonic()
    poll.wait(poll.generation(), 5.0)
    assert 0.25 < time.monotonic() - began < 1.5
    began = time.monotonic()
    poll.wait(poll.generation() - 1, 5.0)  # it has moved on since: no wait at all
    assert time.monotonic() - began < 0.1


def test_only_limit_requests_may_wait_at_once():
    poll = LongPoll(limit=1)
    with poll.slot() as first:
        with poll.slot() as second:
            assert first is True and second is False
    with poll.slot() as again:
        assert again is True  # released
