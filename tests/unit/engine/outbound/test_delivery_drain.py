"""The fast drain (engine.outbound.delivery_drain) against a real database and real local receivers.

The test plays the worker (``jobs.claim`` then the runner, as in test_delivery.py), with a retry
schedule scaled so that the first retry is 500 s away: anything that goes out again within the
test's few seconds was brought forward by a drain, never by its schedule.
"""
from __future__ import annotations

import uuid

import pytest

from engine import jobs
from engine.jobs.worker import run_job
from engine.store.db import utcnow
from engine.store.models import Channel
from tests.receiver import Answer, Receiver
from tests.unit.engine.outbound import test_delivery as base
from tests.unit.engine.outbound.test_delivery import drive, fresh, job_of, queue, status_is

ctx, tenant_id, make_runner = base.ctx, base.tenant_id, base.make_runner   # the same fixtures

SCALE = 100.0   # the schedule's first delay, 5 s, becomes 500 s
FAR_S = 400.0   # "still waiting out its schedule": its next attempt at least this far away
NO_PROBE = 10_000.0  # the drain's own tests: no recovery probe brings a destination's oldest forward


def key() -> str:
    return f"chat:{uuid.uuid4().hex[:8]}"


def seconds_until_next_attempt(delivery_id: int) -> float:
    row = fresh(delivery_id)
    assert row.status == "queued" and row.next_attempt_at is not None, (row.status, row.next_attempt_at)
    return (row.next_attempt_at - utcnow()).total_seconds()


def failed_once(*delivery_ids: int):
    return lambda: all(fresh(d).attempts == 1 and fresh(d).next_attempt_at is not None for d in delivery_ids)


@pytest.fixture
def down():
    """A receiver that answers 503 until told otherwise (``default``)."""
    started = Receiver(default=Answer(503)).start()
    yield started
    started.stop()


def test_a_success_brings_the_destinations_waiting_deliveries_forward_in_chat_order(ctx, tenant_id, down,
                                                                                   make_runner, uow):
    runner = make_runner(scale=SCALE, probe_s=NO_PROBE)
    elsewhere = Receiver(default=Answer(503)).start()
    try:
        chat_a, chat_b = key(), key()
        a1, a2, a3 = (queue(uow, tenant_id, down.url, chat_a, f"a{i}") for i in (1, 2, 3))
        b1, b2 = (queue(uow, tenant_id, down.url, chat_b, f"b{i}") for i in (1, 2))
        other = queue(uow, tenant_id, elsewhere.url, key(), "other destination")
        drive(uow, runner, failed_once(a1, b1, other))
        for head in (a1, b1, other):
            assert seconds_until_next_attempt(head) > FAR_S
        down.default = Answer(200)                      # the receiver is back ...
        first = queue(uow, tenant_id, down.url, key(), "first success")
        drive(uow, runner, lambda: all(fresh(d).status == "sent" for d in (first, a1, a2, a3, b1, b2)), timeout=20)
        texts = [r.json()["text"] for r in down.requests]
        assert sorted(texts[:2]) == ["a1", "b1"]          # the heads' failed attempts
        sent = texts[2:]
        assert sent[0] == "first success"
        # ... every waiting delivery went out once, each chat in its order
        assert sorted(sent) == sorted(["first success", "a1", "a2", "a3", "b1", "b2"])
        assert [t for t in sent if t.startswith("a")] == ["a1", "a2", "a3"]
        assert [t for t in sent if t.startswith("b")] == ["b1", "b2"]
        # A delivery to another destination keeps its schedule.
        assert fresh(other).attempts == 1 and seconds_until_next_attempt(other) > FAR_S
        assert len(elsewhere.requests) == 1
    finally:
        elsewhere.stop()


def test_a_channels_success_drains_the_channel_whatever_its_url(ctx, tenant_id, down, make_runner, uow):
    """The destination of a channel's deliveries is the channel (its webhook URL may change)."""
    runner = make_runner(scale=SCALE, probe_s=NO_PROBE)
    channel = Channel(tenant_id=tenant_id, type="webchat", name=f"site-{uuid.uuid4().hex[:8]}",
                      webhook_url=down.url + "/old", webhook_secret="s", settings={})
    uow.session.add(channel)
    uow.commit()
    waiting = queue(uow, tenant_id, down.url + "/old", key(), "waiting", channel_id=channel.id)
    same_url_no_channel = queue(uow, tenant_id, down.url + "/new", key(), "not the channel")
    drive(uow, runner, failed_once(waiting, same_url_no_channel))
    down.default = Answer(200)
    channel.webhook_url = down.url + "/new"
    uow.commit()
    first = queue(uow, tenant_id, down.url + "/new", key(), "first", channel_id=channel.id)
    drive(uow, runner, status_is(waiting, "sent"), timeout=20)
    assert fresh(first).status == "sent"
    assert fresh(same_url_no_channel).attempts == 1 and seconds_until_next_attempt(same_url_no_channel) > FAR_S


def test_a_pause_the_receiver_asked_for_is_not_cut_short(ctx, tenant_id, down, make_runner, uow):
    runner = make_runner(scale=0.01)   # schedule: 50 ms; the receiver's Retry-After: 600 s
    down.script(Answer(429, headers={"Retry-After": "600"}))
    down.default = Answer(200)
    paused = queue(uow, tenant_id, down.url, key(), "paused")
    drive(uow, runner, failed_once(paused))
    assert seconds_until_next_attempt(paused) > 500
    first = queue(uow, tenant_id, down.url, key(), "first")
    drive(uow, runner, status_is(first, "sent"))
    assert fresh(paused).attempts == 1 and seconds_until_next_attempt(paused) > 500
    assert job_of(paused).run_at == fresh(paused).next_attempt_at


def test_a_delivery_the_receiver_refuses_alone_is_brought_forward_once_not_on_every_success(
        ctx, tenant_id, down, make_runner, uow):
    runner = make_runner(scale=SCALE, probe_s=NO_PROBE)
    down.default = Answer(200)
    down.script(Answer(500))                            # the poison message's first attempt
    poison = queue(uow, tenant_id, down.url, key(), "poison")
    drive(uow, runner, failed_once(poison))
    down.script(Answer(200), Answer(500))               # a success, then the drained attempt fails again
    queue(uow, tenant_id, down.url, key(), "ok 1")
    drive(uow, runner, lambda: fresh(poison).attempts == 2 and fresh(poison).next_attempt_at is not None)
    assert seconds_until_next_attempt(poison) > FAR_S
    second = queue(uow, tenant_id, down.url, key(), "ok 2")  # this success does not bring it forward again
    drive(uow, runner, status_is(second, "sent"))
    assert fresh(poison).attempts == 2 and seconds_until_next_attempt(poison) > FAR_S
    assert [r.json()["text"] for r in down.requests] == ["poison", "ok 1", "poison", "ok 2"]


# -- the recovery probe ------------------------------------------------------------------------

PROBE_S = 30.0


def test_a_destinations_oldest_failing_delivery_probes_it_and_the_others_keep_their_schedule(
        ctx, tenant_id, down, make_runner, uow):
    runner = make_runner(scale=SCALE, probe_s=PROBE_S)
    oldest, other_chat = queue(uow, tenant_id, down.url, key(), "oldest"), queue(uow, tenant_id, down.url, key(), "b")
    drive(uow, runner, failed_once(oldest, other_chat))
    assert 0 < seconds_until_next_attempt(oldest) <= PROBE_S < FAR_S < seconds_until_next_attempt(other_chat)
    assert job_of(oldest).run_at == fresh(oldest).next_attempt_at


@pytest.mark.parametrize("order", ["younger-recorded-first", "older-recorded-first"])
def test_one_delivery_probes_a_destination_whichever_of_a_wave_is_recorded_first(
        ctx, tenant_id, down, make_runner, uow, order):
    """Two workers took two chats' heads at once; whichever failure is recorded first (the younger's
    while the older is not even attempted yet, or the other way round), one of them probes."""
    runner = make_runner(scale=SCALE, probe_s=PROBE_S)
    older, younger = queue(uow, tenant_id, down.url, key(), "older"), queue(uow, tenant_id, down.url, key(), "younger")
    claimed = {job.payload["delivery_id"]: job for job in jobs.claim(uow, base.WORKER, 30, limit=10)}
    uow.commit()
    first, second = (younger, older) if order == "younger-recorded-first" else (older, younger)
    run_job(base.units(), runner, claimed[first], base.WORKER)
    run_job(base.units(), runner, claimed[second], base.WORKER)
    uow.rollback()
    probing = [d for d in (older, younger) if seconds_until_next_attempt(d) <= PROBE_S]
    assert len(probing) == 1, {d: seconds_until_next_attempt(d) for d in (older, younger)}
    assert all(seconds_until_next_attempt(d) > FAR_S for d in (older, younger) if d not in probing)
    assert len(down.requests) == 2


def test_no_probe_before_the_receivers_pause_nor_for_a_destination_that_takes_others(
        ctx, tenant_id, down, make_runner, uow):
    runner = make_runner(scale=SCALE, probe_s=PROBE_S)
    down.script(Answer(503, headers={"Retry-After": "120"}))
    paused = queue(uow, tenant_id, down.url, key(), "paused")
    drive(uow, runner, failed_once(paused))
    assert 110 < seconds_until_next_attempt(paused) <= 121   # its Retry-After, not the 500 s schedule
    # A destination that took a delivery a moment ago is up: a delivery it refuses is a poison message.
    up = Receiver(default=Answer(200)).start()
    try:
        taken = queue(uow, tenant_id, up.url, key(), "taken")
        drive(uow, runner, status_is(taken, "sent"))
        up.default = Answer(400)
        refused = queue(uow, tenant_id, up.url, key(), "refused")
        drive(uow, runner, failed_once(refused))
        assert seconds_until_next_attempt(refused) > FAR_S
    finally:
        up.stop()
