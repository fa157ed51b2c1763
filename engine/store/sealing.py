"""Secrets at rest: every stored secret (messenger credentials, channel and webhook secrets, the
secret a queued delivery is signed with) is sealed with AES-256-GCM under ``BATON_SECRET_KEY``.

The key ring holds the current key (what seals) and older ones (still opened while a rotation
runs). A sealed value names its key: ``bsk1:<key id>:<base64url(nonce | ciphertext | tag)>``. The
columns that hold secrets use ``SealedText`` / ``SealedJSON``, so whichever path reads or writes
them (the ORM, Core, ``driver.Statement``) seals and opens them; a job payload's secret is sealed
by its writer (``seal``, ``open_sealed``). The ``secret_keys`` table lists the ids of the keys the
data was sealed with: a process whose ring lacks one refuses to start (``check``), so a wrong or
missing key never yields a half-working server. How to keep and rotate the key:
docs/operations.md, "Security model".
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, String, Text, delete, insert, select, update
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from engine.store.db import db, utcnow

PREFIX = "bsk1:"
_NONCE = 12
_DOCS = "docs/operations.md, \"Security model\""


class SecretKeyError(Exception):
    """The secret key is missing, malformed, or not the one the database's secrets were sealed with."""


class SealedValueError(Exception):
    """A sealed value that no key of the ring opens (tampered with, or sealed under a key not held)."""


def new_key() -> str:
    """A fresh key as ``BATON_SECRET_KEY`` takes it: 32 random bytes, base64url."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")


def key_id_of(key: bytes) -> str:
    """A short public name of a key (never enough to find it): 8 hex digits of a hash."""
    return hashlib.sha256(b"baton secret key id:" + key).hexdigest()[:8]


def _decoded(text: str, where: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text.strip().encode("ascii") + b"==")
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raw = b""
    if len(raw) != 32:
        raise SecretKeyError(f"{where} must hold keys of 32 bytes in base64url (44 characters), as "
                             f"`flask --app app secrets new-key` prints them; see {_DOCS}.")
    return raw


class KeyRing:
    """The keys this process holds, the first one current. ``source`` names where they came from;
    with a key file (``path``), a change of the file (a rotation by another process) is picked up."""

    def __init__(self, keys: list[bytes], *, source: str, path: Path | None = None):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if not keys:
            raise SecretKeyError(f"{source} holds no key: `flask --app app secrets new-key` prints one "
                                 f"(see {_DOCS}).")
        self._aesgcm = AESGCM
        self.source, self.path = source, path
        self._lock = threading.Lock()
        self._stamp = _stamp_of(path)
        self._set(keys)

    def _set(self, keys: list[bytes]) -> None:
        ciphers = {key_id_of(key): self._aesgcm(key) for key in keys}
        self.current_id = key_id_of(keys[0])
        self.keys = tuple(keys)
        self._ciphers = ciphers

    @property
    def key_ids(self) -> frozenset[str]:
        return frozenset(self._ciphers)

    def refresh(self) -> None:
        """Re-read the key file when it changed (another process rotated the key)."""
        if self.path is None:
            return
        stamp = _stamp_of(self.path)
        if stamp != self._stamp:
            with self._lock:
                self._set(read_key_file(self.path))
                self._stamp = stamp

    def seal(self, plain: str) -> str:
        self.refresh()
        nonce = os.urandom(_NONCE)
        sealed = self._ciphers[self.current_id].encrypt(nonce, plain.encode("utf-8"), None)
        return f"{PREFIX}{self.current_id}:" + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")

    def open(self, value: str) -> str:
        if not value.startswith(PREFIX):
            return value  # stored before secrets were sealed (migration 0025 seals those)
        key_id, _, data = value[len(PREFIX):].partition(":")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            self.refresh()
            cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise SealedValueError(f"A stored secret was sealed with key {key_id}, which {self.source} does not hold.")
        try:
            raw = base64.urlsafe_b64decode(data.encode("ascii"))
            return cipher.decrypt(raw[:_NONCE], raw[_NONCE:], None).decode("utf-8")
        except Exception as exc:  # noqa: BLE001 - InvalidTag, bad base64: the value is not ours
            raise SealedValueError(f"A stored secret sealed with key {key_id} does not open.") from exc

    def is_current(self, value: str) -> bool:
        return value.startswith(f"{PREFIX}{self.current_id}:")


def _stamp_of(path: Path | None) -> tuple | None:
    if path is None:
        return None
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


def read_key_file(path: Path) -> list[bytes]:
    lines = [line.strip() for line in path.read_text(encoding="ascii").splitlines()]
    return [_decoded(line, f"The key file {path}") for line in lines if line and not line.startswith("#")]


def decode_key(text: str) -> bytes:
    """One key as written in the key file or ``BATON_SECRET_KEY``."""
    return _decoded(text, "A key")


def write_key_file(path: Path, keys: list[bytes], *, exclusive: bool = False) -> None:
    """Write the key file with mode 0600: atomically (a rename), or only if it does not exist yet."""
    text = "".join(base64.urlsafe_b64encode(key).decode("ascii") + "\n" for key in keys)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole beside it, then put in place in one step: a reader never sees half a file.
    temporary = path.with_name(path.name + f".{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    try:
        if exclusive:
            os.link(temporary, path)  # FileExistsError when another process made it first
        else:
            os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()


@dataclass(frozen=True)
class Loaded:
    """A ring and, when no key existed yet, the new key that ``check`` writes to ``path``."""

    ring: KeyRing
    new_file: Path | None = None


def load(environment_value: str | None, key_file: Path) -> Loaded:
    """The ring from ``BATON_SECRET_KEY`` (comma-separated, the first current), else from the key
    file, else a new key to be written there once the database agrees (``check``)."""
    if environment_value:
        keys = [_decoded(part, "BATON_SECRET_KEY") for part in environment_value.split(",") if part.strip()]
        return Loaded(KeyRing(keys, source="BATON_SECRET_KEY"))
    if key_file.exists():
        return Loaded(KeyRing(read_key_file(key_file), source=f"the key file {key_file}", path=key_file))
    return Loaded(KeyRing([_decoded(new_key(), "A new key")], source=f"a new key for {key_file}"), new_file=key_file)


_ring: KeyRing | None = None


def install(ring: KeyRing) -> None:
    """This process's ring (``create_app``); every sealed column uses it."""
    global _ring
    _ring = ring


def ring() -> KeyRing:
    if _ring is None:
        raise SecretKeyError("No secret key is installed: the app factory installs it (create_app).")
    return _ring


def seal(plain: str) -> str:
    return ring().seal(plain)


def open_sealed(value: str | None) -> str | None:
    return None if value is None else ring().open(value)


class SealedText(TypeDecorator):
    """A secret string column, sealed in the database."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return None if value is None else seal(value)

    def process_result_value(self, value, dialect):
        return open_sealed(value)


class SealedJSON(TypeDecorator):
    """A JSON object column holding secrets, stored as ``{"sealed": "<the sealed JSON text>"}``."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        return {"sealed": seal(json.dumps(value, separators=(",", ":"), ensure_ascii=False))}

    def process_result_value(self, value, dialect):
        if isinstance(value, dict) and set(value) == {"sealed"} and isinstance(value["sealed"], str):
            return json.loads(ring().open(value["sealed"]))
        return value


class SecretKey(db.Model):
    """The id of a key some stored secret was sealed with (``check``: a process must hold them all)."""

    __tablename__ = "secret_keys"
    key_id: Mapped[str] = mapped_column(String(16), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


_keys = SecretKey.__table__


def check(connection, loaded: Loaded) -> None:
    """Refuse a ring that lacks a key the database's secrets were sealed with (SecretKeyError,
    saying what to do). ``connection``: a SQLAlchemy connection."""
    ring_ = loaded.ring
    used = set(connection.execute(select(_keys.c.key_id)).scalars())
    missing = sorted(used - ring_.key_ids)
    if missing:
        where = ("set BATON_SECRET_KEY to it (or put the key file back)" if loaded.new_file is not None
                 else f"{ring_.source} holds another key")
        raise SecretKeyError(
            f"This database's secrets were sealed with key {', '.join(missing)}, which {ring_.source} does not "
            f"hold: {where}. Baton does not start without it. If the key is lost, see {_DOCS} "
            f"(\"Losing the key\"): `flask --app app secrets forget` drops the sealed secrets, and the channels "
            f"and webhook secrets must then be set again.")


def register(connection, ring_: KeyRing) -> None:
    """Record the current key's id: from now on a process must hold it to start."""
    if connection.execute(select(_keys.c.key_id).where(_keys.c.key_id == ring_.current_id)).first() is None:
        connection.execute(insert(_keys).values(key_id=ring_.current_id, created_at=utcnow()))


# -- re-sealing: migration 0025 (plaintext rows) and `flask secrets rotate` (older keys) ----------
# The columns as stored, read and written without the sealed types.

def _raw_tables():
    from sqlalchemy import Boolean, Column, Integer, MetaData, Table

    meta = MetaData()
    channels = Table("channels", meta, Column("id", Integer, primary_key=True), Column("type", String(16)),
                     Column("webhook_secret", Text), Column("settings", JSON), Column("enabled", Boolean))
    routes = Table("webhook_routes", meta, Column("id", Integer, primary_key=True), Column("secret", Text))
    jobs = Table("jobs", meta, Column("id", Integer, primary_key=True), Column("kind", String(32)),
                 Column("payload", JSON))
    return channels, routes, jobs


def _resealed(ring_: KeyRing, value: Any) -> Any:
    """``value`` sealed under the current key, or None when it already is (or holds nothing)."""
    if isinstance(value, str):
        return None if ring_.is_current(value) else ring_.seal(ring_.open(value))
    if isinstance(value, dict):
        if set(value) == {"sealed"} and isinstance(value["sealed"], str):
            inner = _resealed(ring_, value["sealed"])
            return None if inner is None else {"sealed": inner}
        return {"sealed": ring_.seal(json.dumps(value, separators=(",", ":"), ensure_ascii=False))}
    return None


def reseal_all(connection, ring_: KeyRing) -> int:
    """Seal every stored secret under the ring's current key (plaintext ones too); how many changed.
    Each row is updated only if it still holds what was read (a concurrent change wins)."""
    channels, routes, jobs = _raw_tables()
    changed = 0
    for table, column in ((channels, channels.c.webhook_secret), (channels, channels.c.settings),
                          (routes, routes.c.secret)):
        for row_id, value in connection.execute(select(table.c.id, column).where(column.is_not(None))).all():
            new = _resealed(ring_, value)
            if new is not None:
                guard = column == value if isinstance(value, str) else column.is_not(None)
                changed += connection.execute(update(table).where(table.c.id == row_id, guard)
                                              .values({column.key: new})).rowcount
    for row_id, payload in connection.execute(select(jobs.c.id, jobs.c.payload).where(jobs.c.kind == "deliver")).all():
        if isinstance(payload, dict) and isinstance(payload.get("secret"), str):
            new = _resealed(ring_, payload["secret"])
            if new is not None:
                changed += connection.execute(update(jobs).where(jobs.c.id == row_id)
                                              .values(payload={**payload, "secret": new})).rowcount
    connection.execute(delete(_keys).where(_keys.c.key_id != ring_.current_id))
    register(connection, ring_)
    return changed


def forget_all(connection) -> int:
    """For a lost key: drop every sealed secret (the channels keep their rows, without credentials;
    webhooks lose their secret; queued deliveries go unsigned), and forget the old keys' ids."""
    channels, routes, jobs = _raw_tables()
    dropped = connection.execute(update(channels).values(webhook_secret=None, settings={})).rowcount
    # A messenger channel without its credentials cannot answer: off until it is connected again.
    connection.execute(update(channels).where(channels.c.type != "webchat").values(enabled=False))
    dropped += connection.execute(update(routes).where(routes.c.secret.is_not(None)).values(secret=None)).rowcount
    for row_id, payload in connection.execute(select(jobs.c.id, jobs.c.payload).where(jobs.c.kind == "deliver")).all():
        if isinstance(payload, dict) and "secret" in payload:
            connection.execute(update(jobs).where(jobs.c.id == row_id)
                               .values(payload={k: v for k, v in payload.items() if k != "secret"}))
            dropped += 1
    connection.execute(delete(_keys))
    return dropped
