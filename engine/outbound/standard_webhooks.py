"""Standard Webhooks signatures (https://www.standardwebhooks.com, INTERFACE §5.10): ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``.

Outbound deliveries carry them beside ``X-Baton-Signature``; an inbound webhook with a secret
accepts them (``verify``; the replay check of a seen ``webhook-id`` is the caller's, which stores
them). A secret written ``whsec_<base64>`` is, as the standard defines, the bytes that base64 holds;
any other secret is its UTF-8 bytes (what ``X-Baton-Signature`` has always used).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from engine.errors import UnauthorizedError

PREFIX = "whsec_"
TOLERANCE_S = 300   # a timestamp further off than this from now is refused
MAX_ID = 255


def key_of(secret: str) -> bytes:
    if secret.startswith(PREFIX):
        try:
            return base64.b64decode(secret[len(PREFIX):], validate=True)
        except (binascii.Error, ValueError):
            pass  # not base64 after all: the characters themselves, like any other secret
    return secret.encode("utf-8")


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,`` signature of the body as sent."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key_of(secret), signed, hashlib.sha256).digest()).decode("ascii")


def headers(secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {"webhook-id": message_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(secret, message_id, timestamp, body)}


def verify(secret: str, message_id: str | None, timestamp: str | None, signatures: str | None, body: bytes,
           now_s: float) -> None:
    """Raise UnauthorizedError (401) unless the three headers are well-formed, the timestamp is
    within ``TOLERANCE_S`` of now and one of the space-separated ``v1,`` signatures matches."""
    if not message_id or len(message_id) > MAX_ID:
        raise UnauthorizedError(f"The webhook-id header must be 1 to {MAX_ID} characters.")
    if not timestamp or not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        raise UnauthorizedError("The webhook-timestamp header must be the Unix time in seconds.")
    if abs(now_s - int(timestamp)) > TOLERANCE_S:
        raise UnauthorizedError(f"The webhook-timestamp is more than {TOLERANCE_S // 60} minutes from now.")
    if not signatures:
        raise UnauthorizedError("The webhook-signature header is missing.")
    expected = signature(secret, message_id, int(timestamp), body).encode()
    matched = False
    for given in signatures.split():
        version, _, encoded = given.partition(",")
        if version != "v1":
            continue
        try:
            base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise UnauthorizedError("The webhook-signature header holds a signature that is not base64.") from None
        matched = hmac.compare_digest(given.encode(), expected) or matched
    if not matched:
        raise UnauthorizedError("The webhook-signature does not match the body.")
