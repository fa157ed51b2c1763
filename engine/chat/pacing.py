"""Sending within each messenger's limits, shared by every worker process: the ``send_pacing`` table
holds, per key (a bot, a number, a chat), the earliest moment the messenger may next be called.

A messenger delivery about to go reserves a **slot**: the latest of now and each of its keys'
``next_at`` (its bot's, its chat's), and moves each key on by its interval (1/rate), in the deciding
transaction, under the keys' row locks (PostgreSQL; SQLite's writes are serialized anyway). So two
worker processes never take the same slot, and the slots of a bot are spaced by its interval
whichever process sends them. A slot within ``max_sleep_s`` is waited for in the call thread; a
later one is kept in the job (``delivery_runner.SLOT``) and the job sleeps until just before it, without counting
an attempt: a burst of a thousand replies becomes a queue of slots, not a thousand retries.

A chat's replies are sent one after the other anyway (the delivery runner sends only the head of a
chat's ordering key), so the order per chat never depends on the slots.

When the messenger says to slow down anyway (Telegram's 429 ``retry_after``, WhatsApp's 130429,
Viber's status 12), the whole bot waits: its ``hold`` key moves to then, which every slot reserved
before must respect too (a kept slot earlier than the hold is reserved again), and its key's next
slot moves past it. WhatsApp's pair rate (131056) holds only that chat.
"""
from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from engine.store.db import is_postgres, utcnow
from engine.store.models import SendPacing
from engine.store.unit_of_work import UnitOfWork

EPOCH = datetime(2000, 1, 1)
KEPT_SLOT_LATE_S = 1.0        # a kept slot more than this in the past is stale (a retry's): reserve again


@dataclass(frozen=True)
class Limits:
    """One messenger's limits, as messages per second (0: no limit): per bot (Telegram bot, WhatsApp
    number, Viber account), per chat, and per group chat (Telegram's groups: negative chat ids)."""

    per_bot: float = 0.0
    per_chat: float = 0.0
    per_group: float = 0.0
    slow_down_s: float = 1.0     # how long the bot waits when told to slow down without a figure

    def intervals(self, chat_id: str | None) -> tuple[float, float]:
        """(bot interval, chat interval) in seconds; 0: not paced."""
        chat = self.per_group if chat_id is not None and chat_id.startswith("-") and self.per_group else self.per_chat
        return _interval(self.per_bot), _interval(chat) if chat_id is not None else 0.0


def _interval(rate: float) -> float:
    return 1.0 / rate if rate > 0 else 0.0


@dataclass(frozen=True)
class Reserved:
    """A slot: ``at`` to send, or ``later`` (True) when it is too far to wait for in the call thread."""

    at: datetime
    later: bool


_pacing = SendPacing.__table__
_READ = select(_pacing.c.key, _pacing.c.next_at).where(_pacing.c.key.in_(bindparam("keys", expanding=True)))
_PRUNE = delete(_pacing).where(_pacing.c.next_at < bindparam("before"))
PRUNE_CHANCE = 0.002
_AT_LEAST = (update(_pacing).where(_pacing.c.key == bindparam("the_key"), _pacing.c.next_at < bindparam("at"))
             .values(next_at=bindparam("at")))
_SET = update(_pacing).where(_pacing.c.key == bindparam("the_key")).values(next_at=bindparam("at"))


class Pacing:
    """The limits of each messenger type (``limits``: by channel type), and the slots they give."""

    def __init__(self, limits: Mapping[str, Limits], *, max_sleep_s: float = 0.5):
        self.limits = dict(limits)
        self.max_sleep_s = float(max_sleep_s)

    def _keys(self, channel_type: str, channel_id: int, chat_id: str | None) -> list[tuple[str, float]]:
        limits = self.limits.get(channel_type)
        if limits is None:
            return []
        bot, chat = limits.intervals(chat_id)
        keys = []
        if bot:
            keys.append((f"{channel_id}", bot))
        if chat:
            keys.append((f"{channel_id}:{chat_id}", chat))
        return keys

    def reserve(self, uow: UnitOfWork, channel_type: str, channel_id: int, chat_id: str | None,
                kept: str | None = None) -> Reserved | None:
        """In the deciding unit of work: the slot of one call (None: not paced). ``kept``: the slot
        reserved by an earlier decision of this job, used when it is still good."""
        keys = self._keys(channel_type, channel_id, chat_id)
        if not keys:
            return None
        now = utcnow()
        hold_key = f"hold:{channel_id}"
        stored = _locked(uow, [hold_key, *(key for key, _ in keys)])
        hold = stored.get(hold_key, EPOCH)
        if kept is not None:
            try:
                slot = datetime.fromisoformat(kept)
            except ValueError:
                slot = None
            if slot is not None and slot >= hold and slot >= now - timedelta(seconds=KEPT_SLOT_LATE_S):
                return self._reserved(slot, now)
        slot = max([now, hold, *(stored.get(key, EPOCH) for key, _ in keys)])
        for key, interval in keys:
            uow.run(_SET, {"the_key": key, "at": slot + timedelta(seconds=interval)})
        if random.random() < PRUNE_CHANCE:   # chats long quiet: their rows say nothing any more
            uow.run(_PRUNE, {"before": now - timedelta(hours=1)})
        return self._reserved(slot, now)

    def _reserved(self, slot: datetime, now: datetime) -> Reserved:
        return Reserved(slot, (slot - now).total_seconds() > self.max_sleep_s)

    def sent(self, uow: UnitOfWork, channel_type: str, channel_id: int, chat_id: str | None,
             answered_at: datetime) -> None:
        """In the recording unit of work: the chat's call was answered at ``answered_at``; the chat's
        next slot is at least an interval after it (a chat's calls go one after the other, so this is
        what its limit is about). Counted from the answer, not from when the call went out: the
        messenger answered after it took the call and takes the next one after it went out, so the
        interval holds at the messenger's end whatever the network or a busy process delayed either
        call by (counted from the start, a first call slower to arrive than the second by a tenth of a
        second was refused by a limiter as strict as the one in the tests)."""
        limits = self.limits.get(channel_type)
        chat = limits.intervals(chat_id)[1] if limits is not None and chat_id is not None else 0.0
        if chat:
            uow.run(_AT_LEAST, {"the_key": f"{channel_id}:{chat_id}", "at": answered_at + timedelta(seconds=chat)})

    def slow_down(self, uow: UnitOfWork, channel_type: str, channel_id: int, chat_id: str | None,
                  wait_s: float | None, whole_bot: bool) -> None:
        """In the recording unit of work: the messenger said to wait ``wait_s`` (None: no figure);
        the whole bot (its hold and its next slot) or only the chat waits until then."""
        limits = self.limits.get(channel_type)
        if limits is None:
            return
        until = utcnow() + timedelta(seconds=wait_s if wait_s is not None else limits.slow_down_s)
        keys = [f"hold:{channel_id}", f"{channel_id}"] if whole_bot or chat_id is None else \
            [f"{channel_id}:{chat_id}"]
        stored = _locked(uow, keys)
        for key in keys:
            if stored.get(key, EPOCH) < until:
                uow.run(_SET, {"the_key": key, "at": until})


def _locked(uow: UnitOfWork, keys: list[str]) -> dict[str, datetime]:
    """The keys' ``next_at``, their rows created when missing and locked (in key order: no deadlock)."""
    keys = sorted(set(keys))
    insert = (postgresql.insert if is_postgres() else sqlite.insert)(_pacing)
    uow.run(insert.on_conflict_do_nothing(index_elements=["key"]),
            [{"key": key, "next_at": EPOCH} for key in keys])
    query = _READ.order_by(_pacing.c.key)
    if is_postgres():
        query = query.with_for_update()
    return {row.key: row.next_at for row in uow.run(query, {"keys": keys})}
