"""Pacing's slots on a real database: spaced by the bot's and the chat's intervals, kept slots
reused until a hold passes them, a messenger's "slow down" holding the whole bot or only a chat."""
from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from engine.chat.pacing import Limits, Pacing
from engine.store.db import utcnow

TELEGRAM = Limits(per_bot=30.0, per_chat=1.0, per_group=20 / 60)


@pytest.fixture
def pacing():
    return Pacing({"telegram": TELEGRAM}, max_sleep_s=0.5)


@pytest.fixture
def bot() -> int:
    return random.randint(10**6, 10**9)       # a channel id of its own: the table is shared by the tests


def seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def test_intervals_are_one_over_the_rates_and_groups_have_their_own():
    assert TELEGRAM.intervals("42") == (pytest.approx(1 / 30), 1.0)
    assert TELEGRAM.intervals("-100123") == (pytest.approx(1 / 30), pytest.approx(3.0))
    assert TELEGRAM.intervals(None) == (pytest.approx(1 / 30), 0.0)
    assert Limits().intervals("42") == (0.0, 0.0)


def test_slots_are_spaced_by_the_bot_and_by_the_chat(ctx, uow, bot):
    # Intervals longer than Telegram's (0.5 s per bot, 5 s per chat): a slot is the latest of now and
    # its keys, so with 1/30 s a busy machine's pause between two reserves made the second "now".
    pacing = Pacing({"telegram": Limits(per_bot=2.0, per_chat=0.2)}, max_sleep_s=0.5)
    first = pacing.reserve(uow, "telegram", bot, "1")
    other_chat = pacing.reserve(uow, "telegram", bot, "2")
    same_chat = pacing.reserve(uow, "telegram", bot, "1")
    uow.commit()
    assert seconds(first.at, utcnow()) < 0.5 and not first.later
    assert seconds(other_chat.at, first.at) == pytest.approx(0.5, abs=1e-3)
    assert seconds(same_chat.at, first.at) == pytest.approx(5.0, abs=1e-3)
    assert same_chat.later                              # seconds away: the job sleeps, not the thread
    assert pacing.reserve(uow, "viber", bot, "1") is None          # no limits for it: not paced


def test_a_kept_slot_is_used_again_unless_stale_or_before_a_hold(ctx, uow, pacing, bot):
    slot = pacing.reserve(uow, "telegram", bot, "1")
    again = pacing.reserve(uow, "telegram", bot, "1", kept=slot.at.isoformat())
    assert again.at == slot.at                          # the same decision, taken up again
    stale = (utcnow() - timedelta(seconds=5)).isoformat()
    assert pacing.reserve(uow, "telegram", bot, "1", kept=stale).at > slot.at
    pacing.slow_down(uow, "telegram", bot, "1", 2.0, whole_bot=True)
    held = pacing.reserve(uow, "telegram", bot, "3", kept=slot.at.isoformat())
    assert seconds(held.at, slot.at) >= 1.9             # the hold passes the kept slot: reserved again
    assert pacing.reserve(uow, "telegram", bot, "1", kept="not a time").at >= held.at
    uow.commit()


def test_a_pair_rate_holds_only_that_chat(ctx, uow, pacing, bot):
    pacing.slow_down(uow, "telegram", bot, "1", 4.0, whole_bot=False)
    other = pacing.reserve(uow, "telegram", bot, "2")
    held = pacing.reserve(uow, "telegram", bot, "1")
    uow.commit()
    assert seconds(other.at, utcnow()) < 0.5
    assert seconds(held.at, other.at) >= 3.9


def test_a_slow_down_without_a_figure_waits_the_messengers_default(ctx, uow, pacing, bot):
    before = utcnow()
    pacing.slow_down(uow, "telegram", bot, None, None, whole_bot=True)
    slot = pacing.reserve(uow, "telegram", bot, "9")
    uow.commit()
    assert seconds(slot.at, before) >= TELEGRAM.slow_down_s * 0.99


def test_a_late_answer_moves_its_chats_next_slot_after_it(ctx, uow, pacing, bot):
    slot = pacing.reserve(uow, "telegram", bot, "1")
    answered = slot.at + timedelta(seconds=0.6)          # a crowded moment: answered 0.6 s after its slot
    pacing.sent(uow, "telegram", bot, "1", answered)
    following = pacing.reserve(uow, "telegram", bot, "1")
    pacing.sent(uow, "telegram", bot, "1", following.at - timedelta(seconds=5))   # never moves it back
    after = pacing.reserve(uow, "telegram", bot, "1")
    uow.commit()
    assert seconds(following.at, answered) == pytest.approx(1.0, abs=1e-3)
    assert seconds(after.at, following.at) == pytest.approx(1.0, abs=1e-3)
