"""engine.delivery without a database: the retry schedule, the body, the §4.3 payload and headers."""
from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime, timedelta, timezone

import pytest

from engine import delivery
from engine.delivery import RetrySchedule

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


def test_message_payload_is_exactly_the_four_fields_with_a_millisecond_utc_timestamp():
    payload = delivery.message_payload("c-1", "Hello!", datetime(2026, 11, 22, 10, 15, 0, 123456))
    assert payload == {"chat_id": "c-1", "text": "Hello!", "reply_to_message_id": None,
                       "timestamp": "2026-11-22T10:15:00.123Z"}
    assert list(payload) == ["chat_id", "text", "reply_to_message_id", "timestamp"]
    aware = datetime(2026, 11, 22, 12, 15, 0, 5000, tzinfo=timezone(timedelta(hours=2)))
    assert delivery.message_payload("c", "t", aware)["timestamp"] == "2026-11-22T10:15:00.005Z"


def test_body_is_compact_utf8_json_and_refuses_what_cannot_be_sent():
    body = delivery.encode_body({"chat_id": "c-1", "text": "Zoë 👋 \"q\"", "reply_to_message_id": None})
    assert body == '{"chat_id":"c-1","text":"Zoë 👋 \\"q\\"","reply_to_message_id":null}'
    assert json.loads(body.encode("utf-8")) == {"chat_id": "c-1", "text": "Zoë 👋 \"q\"", "reply_to_message_id": None}
    for bad in ({"x": float("nan")}, {"x": "\ud800"}, ["not", "an", "object"]):
        with pytest.raises(ValueError):
            delivery.encode_body(bad)


def test_headers_carry_uid_timestamp_and_a_signature_only_with_a_secret():
    body = '{"chat_id":"c-1","text":"Zoë"}'.encode()
    signed = delivery.request_headers("abc123", body, "s3cret", now_s=1_790_000_000.7)
    assert signed == {
        "Content-Type": "application/json; charset=utf-8", "X-Baton-Delivery": "abc123",
        "X-Baton-Timestamp": "1790000000",
        "X-Baton-Signature": "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()}
    for no_secret in (None, ""):
        assert "X-Baton-Signature" not in delivery.request_headers("abc123", body, no_secret)
