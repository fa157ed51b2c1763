"""engine.delivery against a real database (SQLite and PostgreSQL) and a real local HTTP receiver.

No server and no worker pool: an in-process app (``workers=0``) queues deliveries exactly as the
conversation code does, and the test plays the worker: ``jobs.claim`` then the ``DeliveryRunner``'s
job run as a worker runs it (``engine.jobs.worker.run_job``; with threads for the several-workers test). Every request is a real HTTP POST to ``Receiver``.
"""
from __future__ import annotations

import hashlib
import hmac
import random
import threading
import time
import uuid

import pytest
from flask import current_app
from sqlalchemy import delete, select

from engine import jobs
from engine.auth import create_tenant
from engine.errors import ConflictError, NotFoundError
from engine.outbound import OutboundHttp, delivery, delivery_runner
from engine.store import sealing
from engine.store.db import db, utcnow
from engine.store.models import Channel, Delivery, Job
from engine.jobs.worker import run_job
from tests.harness import claim_jobs
from tests.receiver import Answer, Receiver

WORKER = "unit-worker"


# --- fixtures and helpers -------------------------------------------------------------------------


@pytest.fixture
def ctx(app):
    with app.app_context():
        yield app
        db.session.rollback()
        db.session.execute(delete(Job))  # nothing of one test is left for the next one to run
        db.session.commit()
        db.session.remove()


@pytest.fixture
def tenant_id(ctx, uow) -> int:
    tenant, _key = create_tenant(uow, f"t-{uuid.uuid4().hex[:10]}")
    uow.commit()
    return tenant.id


@pytest.fixture
def key() -> str:
    return f"chan:{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_runner():
    clients = []

    def make(scale: float = 0.001, timeout_s: float = 10.0, allow_private: bool = True,
             probe_s: float = delivery_runner.PROBE_S):
        clients.append(OutboundHttp(allow_private=allow_private))
        return delivery_runner.DeliveryRunner(clients[-1], retry_scale=scale, timeout_s=timeout_s, probe_s=probe_s)

    yield make
    for client in clients:
        client.close()


def queue(uow, tenant_id: int, url: str, ordering_key: str, text: str = "hi", *, secret: str | None = None,
          channel_id: int | None = None, chat_id: str = "c-1") -> int:
    row = delivery.queue(uow, tenant_id, url=url, payload=delivery.message_payload(chat_id, text, utcnow()),
                         secret=secret, ordering_key=ordering_key, channel_id=channel_id)
    delivery_id = row.id
    uow.commit()
    return delivery_id


def fresh(delivery_id: int) -> Delivery:
    return db.session.execute(select(Delivery).where(Delivery.id == delivery_id)
                              .execution_options(populate_existing=True)).scalar_one()


def job_of(delivery_id: int) -> Job | None:
    for job in db.session.execute(select(Job).execution_options(populate_existing=True)).scalars():
        if job.payload.get("delivery_id") == delivery_id:
            return job
    return None


def units():
    return current_app.extensions["baton.units"]


def drive(uow, runner, until, timeout: float = 30.0, worker: str = WORKER) -> None:
    """Be the worker: claim due jobs (committed) and run them until ``until()`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        claimed = jobs.claim(uow, worker, 30, limit=10)
        uow.commit()
        for job in claimed:
            run_job(units(), runner, job, worker)
        done = until()
        uow.rollback()
        if done:
            return
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.002)


def wait_until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        db.session.rollback()
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.02)
    db.session.rollback()


def status_is(delivery_id: int, *statuses: str):
    return lambda: fresh(delivery_id).status in statuses


def header(received, name: str) -> str | None:
    return next((v for k, v in received.headers.items() if k.lower() == name.lower()), None)


def github_verify_signature(payload_body: bytes, secret_token: str, signature_header: str | None) -> None:
    """GitHub's documented check ("Validating webhook deliveries", Python example), independent of Baton's
    code: HMAC-SHA256 of the raw body with the secret, ``sha256=`` + hex digest, constant-time compare."""
    if not signature_header:
        raise PermissionError("signature header is missing!")
    hash_object = hmac.new(secret_token.encode("utf-8"), msg=payload_body, digestmod=hashlib.sha256)
    expected_signature = "sha256=" + hash_object.hexdigest()
    if not hmac.compare_digest(expected_signature, signature_header):
        raise PermissionError("Request signatures didn't match!")


# --- queue ----------------------------------------------------------------------------------------

def test_queue_writes_row_and_job_in_the_callers_transaction(ctx, tenant_id, key, receiver, uow):
    jobs_before = sorted(uow.session.execute(select(Job.id)).scalars())  # other tests' (the database is shared)
    row = delivery.queue(uow, tenant_id, url=receiver.url, payload={"chat_id": "c-1", "text": "Zoë"},
                         secret="s", ordering_key=key, channel_id=None)
    assert row.id is not None and row.status == "queued" and len(row.delivery_uid) == 32
    uow.rollback()
    assert uow.session.execute(select(Delivery).where(Delivery.ordering_key == key)).first() is None
    assert sorted(uow.session.execute(select(Job.id)).scalars()) == jobs_before

    delivery_id = queue(uow, tenant_id, receiver.url, key, "Zoë 👋", secret="s3cret")
    row = fresh(delivery_id)
    assert row.body.startswith('{"chat_id":"c-1","text":"Zoë 👋","reply_to_message_id":null,"timestamp":"')
    assert (row.status, row.attempts, row.event, row.sent_at) == ("queued", 0, "message", None)
    job = job_of(delivery_id)
    assert (job.kind, job.instance_id, set(job.payload)) == ("deliver", None, {"delivery_id", "secret"})
    assert job.payload["secret"].startswith("bsk1:") and sealing.open_sealed(job.payload["secret"]) == "s3cret"
    with pytest.raises(ValueError):
        delivery.queue(uow, tenant_id, url="", payload={}, secret=None, ordering_key=key, channel_id=None)


# --- one delivery ---------------------------------------------------------------------------------

def test_signed_delivery_carries_the_exact_body_bytes_and_headers(ctx, tenant_id, key, receiver, make_runner, uow):
    delivery_id = queue(uow, tenant_id, receiver.url + "/hook?x=1", key, "Zoë 👋 \"quoted\"", secret="s3cret")
    drive(uow, make_runner(), status_is(delivery_id, "sent"))
    row = fresh(delivery_id)
    [got] = receiver.requests
    assert (got.method, got.path) == ("POST", "/hook?x=1")
    assert got.body == row.body.encode("utf-8")
    assert got.json()["text"] == "Zoë 👋 \"quoted\""
    assert list(got.json()) == ["chat_id", "text", "reply_to_message_id", "timestamp"]
    assert header(got, "Content-Type") == "application/json; charset=utf-8"
    assert header(got, "X-Baton-Delivery") == row.delivery_uid
    assert abs(int(header(got, "X-Baton-Timestamp")) - time.time()) < 60
    signature = header(got, "X-Baton-Signature")
    # Our own reading of §4.3 ...
    assert signature == "sha256=" + hmac.new(b"s3cret", got.body, hashlib.sha256).hexdigest()
    # ... and the verifier a receiver would copy from GitHub's documentation.
    github_verify_signature(got.body, "s3cret", signature)
    with pytest.raises(PermissionError):
        github_verify_signature(got.body, "wrong", signature)
    assert (row.status, row.attempts, row.last_status, row.last_error) == ("sent", 1, 200, None)
    assert row.sent_at is not None and row.next_attempt_at is None
    assert job_of(delivery_id) is None


def test_no_signature_header_without_a_secret(ctx, tenant_id, key, receiver, make_runner, uow):
    delivery_id = queue(uow, tenant_id, receiver.url, key, secret=None)
    drive(uow, make_runner(), status_is(delivery_id, "sent"))
    [got] = receiver.requests
    assert header(got, "X-Baton-Signature") is None
    assert header(got, "X-Baton-Delivery") == fresh(delivery_id).delivery_uid


def test_a_channel_delivery_uses_the_channels_current_secret_and_url(ctx, tenant_id, key, make_runner, uow):
    old, new = Receiver().start(), Receiver().start()
    try:
        channel = Channel(tenant_id=tenant_id, type="webchat", name=f"site-{key}", webhook_url=old.url,
                          webhook_secret="first", settings={})
        uow.session.add(channel)
        uow.commit()
        delivery_id = queue(uow, tenant_id, old.url, key, secret="first", channel_id=channel.id)
        channel.webhook_url, channel.webhook_secret = new.url + "/v2", "rotated"   # changed before it went out
        uow.commit()
        drive(uow, make_runner(), status_is(delivery_id, "sent"))
        assert old.requests == []
        [got] = new.requests
        github_verify_signature(got.body, "rotated", header(got, "X-Baton-Signature"))
        assert fresh(delivery_id).url == new.url + "/v2"
    finally:
        old.stop()
        new.stop()


def test_failures_and_timeouts_are_retried_with_the_same_delivery_id(ctx, tenant_id, key, receiver, make_runner, uow):
    receiver.script(Answer(500), Answer(200, delay_s=1.5), Answer(503, {"busy": True}), Answer(404))
    runner = make_runner(scale=0.002, timeout_s=0.5)   # delays 10 ms, 60 ms, 240 ms, 1.2 s
    delivery_id = queue(uow, tenant_id, receiver.url, key, secret="s")
    drive(uow, runner, lambda: fresh(delivery_id).attempts == 1 and fresh(delivery_id).last_status == 500)
    row = fresh(delivery_id)
    assert (row.status, row.last_error) == ("queued", "The receiver answered 500.")
    assert row.next_attempt_at is not None and job_of(delivery_id).run_at == row.next_attempt_at
    drive(uow, runner, status_is(delivery_id, "sent"))
    row = fresh(delivery_id)
    assert (row.attempts, row.last_status, row.last_error) == (5, 200, None)
    requests = receiver.requests
    assert len(requests) == 5
    assert {header(r, "X-Baton-Delivery") for r in requests} == {row.delivery_uid}
    assert {r.body for r in requests} == {row.body.encode("utf-8")}
    for r in requests:
        github_verify_signature(r.body, "s", header(r, "X-Baton-Signature"))
    gaps = [later.at - earlier.at for earlier, later in zip(requests, requests[1:])]
    # after 500: 10 ms; after the timeout (0.5 s): 60 ms; after 503: 240 ms; after 404: 1.2 s. The
    # receiver stamps a request once it has read it, which on a loaded machine can be tens of ms after
    # the sender's timeout clock began: after the timeout only the timeout itself is certain.
    assert gaps[0] >= 0.01 and gaps[1] >= 0.5 and gaps[2] >= 0.24 and gaps[3] >= 1.2


def test_a_longer_retry_after_is_honoured(ctx, tenant_id, key, receiver, make_runner, uow):
    receiver.script(Answer(429, headers={"Retry-After": "1"}), Answer(503, headers={"Retry-After": "0"}))
    delivery_id = queue(uow, tenant_id, receiver.url, key)
    before = utcnow()
    drive(uow, make_runner(scale=0.001), lambda: fresh(delivery_id).attempts == 1)
    row = fresh(delivery_id)
    assert (row.last_status, row.status) == (429, "queued")
    assert (row.next_attempt_at - before).total_seconds() >= 1.0
    drive(uow, make_runner(scale=0.001), status_is(delivery_id, "sent"))
    first, second, third = receiver.requests
    assert second.at - first.at >= 1.0        # Retry-After: 1 beat the 5 ms of the schedule
    assert third.at - second.at < 1.0          # Retry-After: 0 is shorter than the schedule: schedule


# --- ordering -------------------------------------------------------------------------------------

def test_a_later_delivery_of_a_key_never_overtakes_an_earlier_one(ctx, tenant_id, key, receiver, make_runner, uow):
    other = Receiver().start()
    try:
        receiver.script(Answer(500), Answer(500), Answer(500))
        runner = make_runner(scale=0.002)
        first, second, third = (queue(uow, tenant_id, receiver.url, key, text) for text in ("one", "two", "three"))
        elsewhere = queue(uow, tenant_id, other.url, key + ":other-chat", "other")
        drive(uow, runner, lambda: fresh(first).attempts >= 2)
        # The other key went out at once; the later ones of this key wait, parked, for the first.
        assert fresh(elsewhere).status == "sent"
        for waiting in (second, third):
            row = fresh(waiting)
            assert (row.status, row.attempts, row.next_attempt_at) == ("queued", 0, None)
            assert (job_of(waiting).run_at - utcnow()).total_seconds() > 3000   # only a safety net
        drive(uow, runner, status_is(third, "sent"))
        assert [r.json()["text"] for r in receiver.requests] == ["one"] * 4 + ["two", "three"]
        sent_at = [fresh(d).sent_at for d in (first, second, third)]
        assert sent_at == sorted(sent_at)
    finally:
        other.stop()


def test_a_park_and_its_predecessors_wake_up_never_miss_each_other(ctx, tenant_id, key, receiver, make_runner,
                                                                    monkeypatch, uow):
    """The race the per-key lock is for, forced: #2 decides to park (it saw #1 still queued) and,
    before that decision commits, #1 is recorded as sent. #1's wake-up must still find #2 parked."""
    receiver.script(Answer(200, delay_s=0.3))
    runner = make_runner()
    first, second = queue(uow, tenant_id, receiver.url, key, "one"), queue(uow, tenant_id, receiver.url, key, "two")
    job1, job2 = sorted(jobs.claim(uow, WORKER, 30, limit=2), key=lambda j: j.payload["delivery_id"])
    uow.commit()
    decided, go, errors = threading.Event(), threading.Event(), []
    real_head = delivery.head

    def paused_head(*args):
        head = real_head(*args)
        if threading.current_thread().name == "park":
            decided.set()
            go.wait(10)
        return head

    monkeypatch.setattr(delivery, "head", paused_head)
    app = ctx

    def advance(job):
        with app.app_context():
            try:
                run_job(units(), runner, job, WORKER)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

    sending = threading.Thread(target=advance, args=(job1,), name="send")
    sending.start()
    receiver.wait_for(1)                      # #1 is on the wire
    parking = threading.Thread(target=advance, args=(job2,), name="park")
    parking.start()
    assert decided.wait(10)                   # #2 saw #1 queued and holds its decision open
    time.sleep(0.6)                           # #1's answer is back; recording it needs the key
    go.set()
    sending.join(10)
    parking.join(10)
    assert errors == []
    assert fresh(first).status == "sent"
    # #2 was woken when #1 was recorded (its safety-net re-check is an hour away).
    drive(uow, runner, status_is(second, "sent"), timeout=5)
    assert [r.json()["text"] for r in receiver.requests] == ["one", "two"]


@pytest.mark.slow  # a whole (scaled) 24-hour round of retries: `make test` runs it, `make check` does not
def test_dead_after_the_last_attempt_stops_blocking_and_can_be_resent(ctx, tenant_id, key, receiver, make_runner, uow):
    receiver.default = Answer(500)
    # 24 h -> 8.6 s, hourly -> 0.36 s: room for at least ten attempts on a busy machine
    runner = make_runner(scale=0.0001)
    first = queue(uow, tenant_id, receiver.url, key, "one", secret="task-secret")
    second = queue(uow, tenant_id, receiver.url, key, "two", secret="task-secret")
    drive(uow, runner, status_is(first, "dead"))
    receiver.default = Answer(200)
    dead = fresh(first)
    dead_attempts, dead_uid = dead.attempts, dead.delivery_uid   # the row object refreshes later
    first_requests = [r for r in receiver.requests if r.json()["text"] == "one"]
    assert dead.attempts == len(first_requests) >= 10
    assert dead.last_error == f"The receiver answered 500. Gave up after {dead.attempts} attempts."
    assert (dead.last_status, dead.next_attempt_at, dead.sent_at) == (500, None, None)
    # The dead one no longer blocks the next one of its key.
    drive(uow, runner, status_is(second, "sent"))
    texts = [r.json()["text"] for r in receiver.requests]
    assert texts.index("two") == len(first_requests)           # nothing of "two" before "one" was dead
    # Its job is kept, held, with the secret: delivery.retry re-sends it signed, with the same uid.
    held = job_of(first)
    assert held.run_at == delivery.HELD and sealing.open_sealed(held.payload["secret"]) == "task-secret"
    assert delivery.retry(uow, tenant_id, first) == {"delivery_id": first, "status": "queued"}
    uow.commit()
    drive(uow, runner, status_is(first, "sent"))
    resent = receiver.requests[-1]
    assert resent.json()["text"] == "one"
    assert header(resent, "X-Baton-Delivery") == dead_uid
    github_verify_signature(resent.body, "task-secret", header(resent, "X-Baton-Signature"))
    row = fresh(first)
    assert (row.attempts, row.last_status, row.last_error) == (dead_attempts + 1, 200, None)
    with pytest.raises(ConflictError):
        delivery.retry(uow, tenant_id, first)
    other_tenant, _ = create_tenant(uow, f"o-{uuid.uuid4().hex[:8]}")
    with pytest.raises(NotFoundError):
        delivery.retry(uow, other_tenant.id, second)


def test_a_refused_url_is_dead_at_once_with_the_reason(ctx, tenant_id, key, receiver, make_runner, uow):
    delivery_id = queue(uow, tenant_id, receiver.url, key)
    later = queue(uow, tenant_id, receiver.url, key)
    drive(uow, make_runner(allow_private=False), status_is(later, "dead"))
    row = fresh(delivery_id)
    assert (row.status, row.attempts, row.last_status) == ("dead", 1, None)
    assert "not allowed" in row.last_error and "loopback" in row.last_error
    assert receiver.requests == []


def test_give_up_after_internal_errors_makes_it_dead_and_resendable(ctx, tenant_id, key, receiver, make_runner, uow):
    delivery_id = queue(uow, tenant_id, receiver.url, key)
    [job] = jobs.claim(uow, WORKER, 30)
    uow.commit()
    runner = make_runner()
    with units().begin("job:deliver") as giving_up:
        runner.give_up(job, WORKER, giving_up)
    row = fresh(delivery_id)
    assert row.status == "dead" and "internal error" in row.last_error
    delivery.retry(uow, tenant_id, delivery_id)
    uow.commit()
    drive(uow, runner, status_is(delivery_id, "sent"))
    assert len(receiver.requests) == 1


def test_several_workers_keep_each_keys_order(ctx, tenant_id, receiver, make_runner, uow):
    """Four worker threads, three keys of six deliveries, a receiver that fails a third of the time."""
    rng = random.Random(7)
    receiver.script(*(Answer(500 if rng.random() < 0.33 else 200, delay_s=rng.random() * 0.01)
                      for _ in range(200)))
    answers = list(receiver.answers)
    keys = [f"multi:{uuid.uuid4().hex[:6]}:{n}" for n in range(3)]
    ids = {k: [queue(uow, tenant_id, receiver.url, k, f"{n}", chat_id=k) for n in range(6)] for k in keys}
    runner, stop, errors = make_runner(scale=0.0005), threading.Event(), []
    app = ctx

    def work(name: str) -> None:
        with app.app_context():
            try:
                while not stop.is_set():
                    claimed = claim_jobs(units(), name, 30, limit=2)
                    for job in claimed:
                        run_job(units(), runner, job, name)
                    db.session.remove()
                    if not claimed:
                        time.sleep(0.003)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    try:
        all_ids = [d for k in keys for d in ids[k]]
        wait_until(lambda: all(fresh(d).status == "sent" for d in all_ids), timeout=60)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert errors == []
    requests = receiver.requests
    for k in keys:
        seen_ok: set[int] = set()
        for index, request in enumerate(requests):
            body = request.json()
            if body["chat_id"] != k:
                continue
            n = int(body["text"])
            assert n == 0 or n - 1 in seen_ok, f"{k}: #{n} went out before #{n - 1} was delivered"
            ok = index >= len(answers) or answers[index].status == 200
            if ok:
                assert n not in seen_ok, f"{k}: #{n} was delivered twice"
                seen_ok.add(n)
        assert seen_ok == set(range(6))
