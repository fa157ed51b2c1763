"""Telegram's API down, then back, and no customer writes again (SQLite and PostgreSQL): one
of the bot's failing answers probes the API every BATON_DELIVERY_PROBE_S (15 s; 5 s here, to keep the test
short), so the first probe after
the API is back succeeds and drains the rest, within about two probe intervals, each chat in order.

The schedule is stretched (BATON_DELIVERY_RETRY_SCALE=20: the first retry 100 s away): answers that
arrive within two probe intervals were not brought by the schedule.
"""
from __future__ import annotations

from collections import Counter

import pytest

from tests.fakes.telegram import error as telegram_error
from tests.harness import BatonServer
from tests.integration.messengers.helpers import deliveries_of, eventually, new_chat_id
from tests.integration.messengers.test_messenger_drain import CHATS, PER_CHAT, seconds_until
from tests.integration.messengers.test_telegram_chats import Bot

PROBE_S = 5.0


@pytest.fixture
def stretched(own_database, tmp_path, fakes):
    """The schedule stretched, the probe every ``PROBE_S``."""
    server = BatonServer(own_database, tmp_path, BATON_DELIVERY_RETRY_SCALE="20", BATON_DELIVERY_PROBE_S=str(PROBE_S),
                         **fakes.environment()).start()
    yield server
    server.stop()


def test_a_bot_whose_api_comes_back_gets_its_answers_out_without_new_messages(stretched, fakes):
    api = stretched.api(stretched.create_tenant("messenger-probe"))
    fake = fakes.telegram
    bot = Bot(api, fake, "chat_burst.bpmn", count=str(PER_CHAT))
    # Down for every chat's first answer and the first probe; back from the second probe on.
    fake.script(telegram_error(502, "Bad Gateway"), times=CHATS + 1, path_endswith=f"{bot.token}/sendMessage")
    chats = [new_chat_id() for _ in range(CHATS)]
    for chat in chats:
        bot.say(chat, "hello")
    eventually(lambda: [d for d in deliveries_of(api, bot.config_id) if d["attempts"] and d["status"] == "queued"
                        and d["next_attempt_at"] and seconds_until(d["next_attempt_at"]) > 0],
               lambda found: len(found) == CHATS)
    for chat in chats:
        assert bot.texts(chat, PER_CHAT, timeout=4 * PROBE_S) == [f"answer {n}" for n in range(PER_CHAT)]
    calls = bot.calls("sendMessage")
    failures, taken = calls[:CHATS + 1], calls[CHATS + 1:]
    assert len(taken) == CHATS * PER_CHAT
    back_at = failures[-1].at                                   # the last refusal: the API is back after it
    assert taken[-1].at - back_at < 2 * PROBE_S                 # ... the whole backlog within two probes
    assert taken[0].at - failures[CHATS - 1].at >= PROBE_S - 1  # (the second probe, not the schedule's 100 s)
    assert not [body for body, n in Counter(c.body for c in taken).items() if n > 1]  # none twice
