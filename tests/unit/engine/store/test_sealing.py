"""engine.store.sealing: AES-GCM sealed values that name their key, the key ring and its file, the
sealed column types, and the check that refuses a ring lacking a key the database uses."""
from __future__ import annotations

import base64
import stat

import pytest
from sqlalchemy import create_engine

from engine.store import sealing


def ring_of(*keys: str, **kwargs) -> sealing.KeyRing:
    return sealing.KeyRing([sealing.decode_key(key) for key in keys], source="test", **kwargs)


def test_a_sealed_value_names_its_key_hides_the_text_and_opens_again():
    key = sealing.new_key()
    ring = ring_of(key)
    sealed = ring.seal("bot-token-123")
    assert sealed.startswith(f"bsk1:{ring.current_id}:") and "bot-token-123" not in sealed
    assert ring.seal("bot-token-123") != sealed  # a fresh nonce each time
    assert ring.open(sealed) == "bot-token-123" and ring.is_current(sealed)
    assert ring.open("stored before sealing") == "stored before sealing"


def test_a_value_of_another_key_or_tampered_with_does_not_open():
    sealed = ring_of(sealing.new_key()).seal("secret")
    with pytest.raises(sealing.SealedValueError, match="does not hold"):
        ring_of(sealing.new_key()).open(sealed)
    key = sealing.new_key()
    ring = ring_of(key)
    good = ring.seal("secret")
    head, data = good.rsplit(":", 1)
    raw = bytearray(base64.urlsafe_b64decode(data))
    raw[15] ^= 1  # one bit of the ciphertext
    tampered = f"{head}:{base64.urlsafe_b64encode(bytes(raw)).decode()}"
    with pytest.raises(sealing.SealedValueError, match="does not open"):
        ring.open(tampered)


def test_an_older_key_of_the_ring_still_opens_while_the_first_seals():
    old, new = sealing.new_key(), sealing.new_key()
    by_old = ring_of(old).seal("x")
    both = ring_of(new, old)
    assert both.open(by_old) == "x" and not both.is_current(by_old)
    assert both.is_current(both.seal("y"))


@pytest.mark.parametrize("bad", ["", "short", "!" * 44, "a" * 60])
def test_a_malformed_key_is_refused_saying_how_to_make_one(bad):
    with pytest.raises(sealing.SecretKeyError, match="secrets new-key"):
        sealing.load(bad or "   ,  ", __import__("pathlib").Path("/nonexistent/key"))


def test_the_key_file_is_written_0600_once_and_a_rotation_is_followed(tmp_path):
    path = tmp_path / "instance" / "secret.key"
    loaded = sealing.load(None, path)
    assert loaded.new_file == path and not path.exists()
    first = loaded.ring.keys[0]
    sealing.write_key_file(path, [first], exclusive=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        sealing.write_key_file(path, [first], exclusive=True)
    ring = sealing.load(None, path).ring
    assert ring.keys == (first,) and ring.path == path
    sealed = ring.seal("x")
    newer = sealing.decode_key(sealing.new_key())
    sealing.write_key_file(path, [newer, first])  # another process rotated
    assert ring.open(sealed) == "x"
    assert ring.seal("y").startswith(f"bsk1:{sealing.key_id_of(newer)}:")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_check_refuses_a_ring_without_a_key_the_database_used(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'k.db'}")
    sealing.SecretKey.__table__.create(engine)
    first = sealing.Loaded(ring_of(sealing.new_key()))
    with engine.begin() as connection:
        sealing.check(connection, first)
        sealing.register(connection, first.ring)
    other = sealing.Loaded(ring_of(sealing.new_key()))
    with engine.begin() as connection, pytest.raises(sealing.SecretKeyError) as refused:
        sealing.check(connection, other)
    assert first.ring.current_id in str(refused.value) and "Security model" in str(refused.value)
    with engine.begin() as connection:  # the pair (new, old) is accepted
        sealing.check(connection, sealing.Loaded(sealing.KeyRing([*other.ring.keys, *first.ring.keys], source="test")))
    engine.dispose()


@pytest.fixture
def installed():
    """A ring of this test's own, the process's ring put back after it (other tests' apps use theirs)."""
    before = sealing._ring
    sealing.install(ring_of(sealing.new_key()))
    yield
    sealing._ring = before


def test_the_sealed_column_types_seal_on_the_way_in_and_open_on_the_way_out(installed):
    text, json_ = sealing.SealedText(), sealing.SealedJSON()
    stored = text.process_bind_param("s3cret", None)
    assert stored.startswith("bsk1:") and text.process_result_value(stored, None) == "s3cret"
    assert text.process_bind_param(None, None) is None and text.process_result_value(None, None) is None
    settings = {"bot_token": "1:abc", "name": "Zoë"}
    stored_json = json_.process_bind_param(settings, None)
    assert set(stored_json) == {"sealed"} and "1:abc" not in stored_json["sealed"]
    assert json_.process_result_value(stored_json, None) == settings
    assert json_.process_result_value({"plain": 1}, None) == {"plain": 1}  # stored before sealing
