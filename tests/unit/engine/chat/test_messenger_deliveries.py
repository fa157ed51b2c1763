"""Messenger replies through the durable delivery, on a real database and against the fake Bot API:
the test plays the worker (``jobs.claim`` then the ``DeliveryRunner`` with ``MessengerCalls``).

What the integration tests cannot see from outside: a stored call carries no credential, a rate
limit is waited for without moving the retry schedule on, and a call that can never go (its channel
gone, its customer unreachable) dies without a request."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from flask import current_app
from sqlalchemy import select, update

from engine import jobs
from engine.auth import create_tenant
from engine.chat import messenger_deliveries, reachability
from engine.chat.messengers.registry import MESSENGERS
from engine.chat.messengers.sending import OutboundCall
from engine.chat.pacing import Limits, Pacing
from engine.jobs.retry import DeliverySchedule
from engine.outbound import OutboundHttp
from engine.jobs.worker import run_job
from engine.outbound.delivery_runner import DeliveryRunner
from engine.store.db import db, utcnow
from engine.store.models import Channel, Delivery, Job
from tests.fakes.telegram import FakeTelegram, error
from tests.unit.conftest import claim

WORKER = "unit-worker"


@pytest.fixture
def fake():
    with FakeTelegram() as started:
        yield started


@pytest.fixture
def channel(ctx, fake, uow) -> tuple[int, int, str]:
    """(tenant id, config id, bot token) of a Telegram channel whose bot lives at the fake."""
    tenant, _key = create_tenant(uow, f"t-{uuid.uuid4().hex[:10]}")
    token = fake.add_bot()
    row = Channel(tenant_id=tenant.id, type="telegram", name=f"tg-{uuid.uuid4().hex[:6]}",
                  settings={"bot_token": token}, enabled=True, connection={"bot_id": token.split(":")[0]})
    uow.session.add(row)
    uow.commit()
    return tenant.id, row.id, token


@pytest.fixture
def runner(fake):
    with OutboundHttp(allow_private=True) as http:
        yield DeliveryRunner(http, channel_calls=messenger_deliveries.MessengerCalls(MESSENGERS,
                                                                                     {"telegram": fake.api_url}))


def queue(uow, channel, chat_id: str = "42", text: str = "Hello") -> int:
    tenant_id, config_id, _token = channel
    delivery_id = messenger_deliveries.queue_reply(uow, tenant_id, config_id, MESSENGERS["telegram"], chat_id, text).id
    uow.commit()
    return delivery_id


def attempt(uow, runner) -> None:
    """One attempt as a worker makes it: claimed, then run (decide, send, record)."""
    [job] = claim(uow, WORKER, 30, limit=1)
    run_job(current_app.extensions["baton.units"], runner, job, WORKER)


def rows(delivery_id: int) -> tuple[Delivery, Job | None]:
    row = db.session.execute(select(Delivery).where(Delivery.id == delivery_id)
                             .execution_options(populate_existing=True)).scalar_one()
    job = next((j for j in db.session.execute(select(Job).execution_options(populate_existing=True)).scalars()
                if j.payload.get("delivery_id") == delivery_id), None)
    return row, job


def test_the_stored_call_carries_no_credential_and_goes_out_with_the_current_token(channel, runner, fake, uow):
    _tenant, config_id, token = channel
    delivery_id = queue(uow, channel)
    row, _job = rows(delivery_id)
    assert row.url == "telegram:sendMessage" and token not in row.body and token not in row.url
    assert row.ordering_key == f"{config_id}:42"
    new_token = fake.add_bot()
    uow.session.execute(update(Channel).where(Channel.id == config_id).values(settings={"bot_token": new_token}))
    uow.commit()
    attempt(uow, runner)
    row, job = rows(delivery_id)
    assert (row.status, row.external_id, job) == ("sent", str(fake.sent[0]["message_id"]), None)
    assert fake.sent[0]["token"] == new_token and fake.sent[0]["text"] == "Hello"


def test_a_rate_limit_is_waited_for_without_moving_the_schedule_on(channel, runner, fake, uow):
    _tenant, _config_id, token = channel
    delivery_id = queue(uow, channel)
    fake.script(error(429, "Too Many Requests: retry after 30", retry_after=30), path_endswith=f"{token}/sendMessage")
    before = utcnow()
    attempt(uow, runner)
    row, job = rows(delivery_id)
    assert (row.status, row.attempts, job.payload["base"]) == ("queued", 1, 1)
    assert row.last_error == "Telegram did not take it: Too Many Requests: retry after 30"
    assert timedelta(seconds=29) <= job.run_at - before <= timedelta(seconds=32)

    # Due again: a 5xx now gets the schedule's FIRST delay, as if the rate limit had not counted.
    uow.session.execute(update(Job).where(Job.id == job.id).values(run_at=utcnow()))
    uow.commit()
    fake.script(error(500, "Internal Server Error"), path_endswith=f"{token}/sendMessage")
    before = utcnow()
    attempt(uow, runner)
    row, job = rows(delivery_id)
    first_delay = DeliverySchedule().delay_after(1)
    assert row.attempts == 2
    assert timedelta(seconds=first_delay - 1) <= job.run_at - before <= timedelta(seconds=first_delay + 2)


def test_a_chats_next_reply_waits_an_interval_after_the_messenger_answered_not_after_it_was_sent(
        channel, fake, uow):
    # Telegram takes the first reply at once and its answer comes back 0.6 s later. Paced from when
    # the call went out, the second would reach Telegram 1 s after the first and a strict limiter
    # that saw the first arrive late would refuse it; paced from the answer, it arrives 1.6 s after.
    calls = messenger_deliveries.MessengerCalls(MESSENGERS, {"telegram": fake.api_url},
                                                pacing=Pacing({"telegram": Limits(per_chat=1.0)}, max_sleep_s=3.0))
    fake.answer_late_s = 0.6
    with OutboundHttp(allow_private=True) as http:
        paced = DeliveryRunner(http, channel_calls=calls)
        first = queue(uow, channel, text="one")
        attempt(uow, paced)
        second = queue(uow, channel, text="two")
        attempt(uow, paced)

    assert [rows(first)[0].status, rows(second)[0].status] == ["sent", "sent"]
    assert [m["text"] for m in fake.sent] == ["one", "two"]
    taken_apart_s = fake.sent_times[1] - fake.sent_times[0]
    assert taken_apart_s >= 1.0 + 0.5, taken_apart_s


def test_a_call_that_can_never_go_dies_without_a_request(channel, runner, fake, uow):
    tenant_id, config_id, _token = channel
    gone_chat = queue(uow, channel, chat_id="77")
    reachability.mark(uow, tenant_id, config_id, "77", "the user blocked the bot")
    uow.commit()
    attempt(uow, runner)
    row, job = rows(gone_chat)
    assert (row.status, row.attempts, row.last_error) == (
        "dead", 0, "The customer cannot be reached: the user blocked the bot.")
    assert job.run_at == jobs.HELD_UNTIL                  # kept for delivery.retry

    orphan = queue(uow, channel, chat_id="78")
    uow.session.execute(update(Delivery).where(Delivery.id == orphan).values(channel_id=None))
    uow.commit()
    attempt(uow, runner)
    row, _job = rows(orphan)
    assert (row.status, row.last_error) == ("dead", "The channel was deleted: there are no credentials to send this with.")
    assert fake.requests == []
    shown = uow.session.get(Channel, config_id)
    uow.session.refresh(shown)
    assert shown.last_error.startswith(f"Delivery {gone_chat}: The customer cannot be reached")


def test_a_long_reply_is_one_delivery_per_part_on_the_chats_key(channel, uow):
    text = " ".join(["word"] * 2000)                       # 9,999 characters: three parts of at most 4096
    last = queue(uow, channel, text=text)
    parts = uow.session.execute(select(Delivery).where(Delivery.ordering_key == rows(last)[0].ordering_key)
                               .order_by(Delivery.id)).scalars().all()
    assert [p.id for p in parts][-1] == last and len(parts) == 3
    sent = [OutboundCall.from_json(p.body).payload["text"] for p in parts]
    assert " ".join(sent) == text and all(len(part) <= 4096 for part in sent)
