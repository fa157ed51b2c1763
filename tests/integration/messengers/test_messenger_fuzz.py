"""Fuzzed Telegram updates through a verified webhook (the real secret token, so the bodies reach
the parser and the conversation code): no 5xx, never ``internal``, the JSON error shape; the tenant
still answers afterwards. Cases from tests/fuzz_cases.py."""
from __future__ import annotations

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import fuzz_cases
from tests.integration.messengers.test_telegram_chats import Bot

pytestmark = pytest.mark.slow


def updates():
    chat = st.one_of(st.integers(1, 10**6), fuzz_cases.hostile_values)
    message = st.fixed_dictionaries({}, optional={
        "message_id": st.one_of(st.integers(1, 10**6), fuzz_cases.hostile_values),
        "chat": st.fixed_dictionaries({"id": chat}, optional={"first_name": fuzz_cases.hostile_values}),
        "from": st.fixed_dictionaries({}, optional={"id": chat, "first_name": fuzz_cases.hostile_values}),
        "text": st.one_of(fuzz_cases.texts, fuzz_cases.hostile_values),
        "photo": fuzz_cases.hostile_values})
    update = st.fixed_dictionaries({"update_id": st.one_of(st.integers(1, 10**9), fuzz_cases.hostile_values)},
                                   optional={"message": st.one_of(message, fuzz_cases.hostile_values),
                                             "callback_query": fuzz_cases.hostile_values})
    return st.one_of(update.map(fuzz_cases.encode), update.map(fuzz_cases.encode),
                     fuzz_cases.hostile_values.map(fuzz_cases.encode), st.binary(max_size=40))


def test_fuzzed_telegram_updates_never_break_the_server(mapi, fakes):
    bot = Bot(mapi, fakes.telegram)
    hook = fakes.telegram.webhooks[bot.token]
    judge = fuzz_cases.Judge()
    http = requests.Session()

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(body=updates())
    def run(body):
        response = http.post(hook["url"], data=body, timeout=60, headers={
            "Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": hook["secret_token"]})
        judge.http(response, f"telegram {body[:300]!r}")

    run()
    mapi.call("task.list", per_page=100)
    mapi.call("process.list", per_page=100)
    mapi.call("conversation.list", per_page=100)
    assert judge.requests >= 150
