"""A web-chat receiver outage through a real server (SQLite and PostgreSQL): when the receiver is
back, the backlog drains within seconds of the first success, every answer once, each chat's in
order (the scenario: tests/outage.py; the full-size figure: bench/delivery_drain.py).

The server's delivery schedule is stretched (BATON_DELIVERY_RETRY_SCALE=20: the first retry is
100 s after the first failure), and the test checks the waiting deliveries' next scheduled attempts
are at least a minute away when the receiver comes back: a drain within 10 s cannot be the
schedule's doing.
"""
from __future__ import annotations

import pytest

from tests.harness import BatonServer
from tests.outage import run_outage

CHATS, PER_CHAT = 8, 5
DRAIN_TARGET_S = 10.0     # issue 13: the whole backlog within 10 s of the first success


@pytest.fixture
def stretched_server(own_database, tmp_path):
    # No recovery probe (test_recovery_probe.py): here a new message's success starts the drain.
    server = BatonServer(own_database, tmp_path, BATON_DELIVERY_RETRY_SCALE="20", BATON_DELIVERY_PROBE_S="3600").start()
    yield server
    server.stop()


def test_a_receiver_back_from_an_outage_gets_the_whole_backlog_at_once_in_chat_order(stretched_server, receiver):
    server = stretched_server
    api = server.api(server.create_tenant("outage"))
    result = run_outage(server, api, receiver, chats=CHATS, per_chat=PER_CHAT, drain_timeout_s=50)
    assert result.next_retry_s >= 60, result          # the schedule would wait at least a minute ...
    assert result.drain_s < DRAIN_TARGET_S, result    # ... the drain took seconds
    assert result.drain_s < result.next_retry_s / 6, result
    assert (result.messages, result.duplicates, result.out_of_order) == (result.expected, [], {})
