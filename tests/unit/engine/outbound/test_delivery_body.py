"""engine.outbound.delivery without a database: the body, the web-chat payload, the headers."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import datetime, timedelta, timezone

import pytest

from engine.outbound import delivery

T0 = datetime(2026, 11, 22, 10, 0, 0)


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
        "X-Baton-Signature": "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest(),
        # Standard Webhooks: the same id and time, signed over "<id>.<timestamp>.<body>".
        "webhook-id": "abc123", "webhook-timestamp": "1790000000",
        "webhook-signature": "v1," + base64.b64encode(hmac.new(b"s3cret", b"abc123.1790000000." + body,
                                                               hashlib.sha256).digest()).decode()}
    for no_secret in (None, ""):
        assert "X-Baton-Signature" not in delivery.request_headers("abc123", body, no_secret)
