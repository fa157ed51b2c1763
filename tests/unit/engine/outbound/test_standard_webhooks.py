"""engine.outbound.standard_webhooks: the signature as the standard defines it (checked against
its published example), ``whsec_`` keys, and every refusal of ``verify``."""
from __future__ import annotations

import pytest

from engine.errors import UnauthorizedError
from engine.outbound import standard_webhooks as sw

# The example of the Standard Webhooks specification (and its reference libraries' tests).
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID, TIMESTAMP = "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330
BODY = b'{"test": 2432232314}'
EXPECTED = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_the_specifications_example_signs_as_published():
    assert sw.signature(SECRET, MSG_ID, TIMESTAMP, BODY) == EXPECTED
    assert sw.headers(SECRET, MSG_ID, TIMESTAMP, BODY) == {
        "webhook-id": MSG_ID, "webhook-timestamp": str(TIMESTAMP), "webhook-signature": EXPECTED}


def test_a_plain_secret_is_its_bytes_and_a_bad_whsec_falls_back_to_them():
    assert sw.key_of("plain-secret") == b"plain-secret"
    assert sw.key_of("whsec_@@@") == b"whsec_@@@"


def test_verify_accepts_one_matching_signature_among_several():
    sw.verify(SECRET, MSG_ID, str(TIMESTAMP), f"v2,abc v1,{'A' * 44} {EXPECTED}", BODY, now_s=TIMESTAMP + 299)


@pytest.mark.parametrize("message_id, timestamp, signatures, now, phrase", [
    ("", str(TIMESTAMP), EXPECTED, TIMESTAMP, "webhook-id"),
    (None, str(TIMESTAMP), EXPECTED, TIMESTAMP, "webhook-id"),
    ("x" * 256, str(TIMESTAMP), EXPECTED, TIMESTAMP, "webhook-id"),
    (MSG_ID, "soon", EXPECTED, TIMESTAMP, "Unix time"),
    (MSG_ID, "-1", EXPECTED, TIMESTAMP, "Unix time"),
    (MSG_ID, "١٢٣", EXPECTED, TIMESTAMP, "Unix time"),
    (MSG_ID, str(TIMESTAMP), EXPECTED, TIMESTAMP + 301, "5 minutes"),
    (MSG_ID, str(TIMESTAMP), EXPECTED, TIMESTAMP - 301, "5 minutes"),
    (MSG_ID, str(TIMESTAMP), None, TIMESTAMP, "missing"),
    (MSG_ID, str(TIMESTAMP), "v1,@@@", TIMESTAMP, "not base64"),
    (MSG_ID, str(TIMESTAMP), "v1," + "A" * 44, TIMESTAMP, "does not match"),
    (MSG_ID, str(TIMESTAMP), EXPECTED.replace("v1,", "v2,"), TIMESTAMP, "does not match"),
])
def test_verify_refuses_with_401_naming_what_is_wrong(message_id, timestamp, signatures, now, phrase):
    with pytest.raises(UnauthorizedError) as refused:
        sw.verify(SECRET, message_id, timestamp, signatures, BODY, now_s=now)
    assert phrase in refused.value.message and refused.value.http_status == 401
