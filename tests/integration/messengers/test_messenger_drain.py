"""Telegram's API down, then back (SQLite and PostgreSQL): a messenger's deliveries drain like a
web-chat receiver's, keyed by the channel (the bot): after the first success every waiting answer
goes out at once, each chat's in order, none twice.

The server's delivery schedule is stretched (BATON_DELIVERY_RETRY_SCALE=20: the first retry is
100 s away), so an answer that arrives within seconds was brought forward by the drain.
"""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.fakes.telegram import error as telegram_error
from tests.harness import BatonServer
from tests.integration.messengers.helpers import deliveries_of, eventually, new_chat_id
from tests.integration.messengers.test_telegram_chats import Bot

CHATS, PER_CHAT = 3, 3


@pytest.fixture
def stretched(own_database, tmp_path, fakes):
    # No recovery probe (test_messenger_probe.py): here a new message's success starts the drain.
    server = BatonServer(own_database, tmp_path, BATON_DELIVERY_RETRY_SCALE="20", BATON_DELIVERY_PROBE_S="3600",
                         **fakes.environment()).start()
    yield server
    server.stop()


def seconds_until(stamp: str) -> float:
    return (datetime.fromisoformat(stamp.replace("Z", "+00:00")) - datetime.now(timezone.utc)).total_seconds()


def test_a_bots_waiting_answers_go_out_at_once_after_its_first_success(stretched, fakes):
    api = stretched.api(stretched.create_tenant("messenger-drain"))
    fake = fakes.telegram
    bot = Bot(api, fake, "chat_burst.bpmn", count=str(PER_CHAT))
    fake.script(telegram_error(502, "Bad Gateway"), times=CHATS, path_endswith=f"{bot.token}/sendMessage")
    chats = [new_chat_id() for _ in range(CHATS)]
    for chat in chats:
        bot.say(chat, "hello")
    waiting = eventually(lambda: [d for d in deliveries_of(api, bot.config_id) if d["attempts"] and d["status"] == "queued"
                                  and d["next_attempt_at"] and seconds_until(d["next_attempt_at"]) > 0],
                         lambda found: len(found) == CHATS)   # every head failed and waits (none on the wire)
    assert min(seconds_until(d["next_attempt_at"]) for d in waiting) >= 60      # the schedule: minutes away
    failed = len(bot.calls("sendMessage"))
    first = new_chat_id()
    bot.say(first, "hello")                                                      # Telegram takes this one
    for chat in (*chats, first):
        assert bot.texts(chat, PER_CHAT, timeout=30) == [f"answer {n}" for n in range(PER_CHAT)]
    taken = bot.calls("sendMessage")[failed:]
    assert len(taken) == (CHATS + 1) * PER_CHAT                                  # each once
    assert taken[-1].at - taken[0].at < 10                                       # seconds, not minutes
