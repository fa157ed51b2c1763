"""Parallel first messages of one chat (PostgreSQL's unique index on the active conversation raises
for every loser): each one joins the winner's conversation, never an HTTP 500. Several rounds."""
from __future__ import annotations

import concurrent.futures

import pytest
import requests

from tests.integration.test_webchat import (_in_message_ids_oldest_first, chat_key, channel,  # noqa: F401
                                            collecting, conversations_on, eventually, variables_of)

pytestmark = pytest.mark.slow
ROUNDS = int(__import__("os").environ.get("BATON_RACE_ROUNDS", "6"))
PARALLEL = 20


def test_parallel_first_messages_of_one_chat_all_join_one_conversation(server, api, collecting, chat_key):  # noqa: F811
    url = f"{server.base_url}/channels/webchat/{collecting['config_id']}/inbound"
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=PARALLEL, pool_maxsize=PARALLEL)
    session.mount("http://", adapter)
    for round_ in range(ROUNDS):
        chat_id = f"race-{round_}"
        texts = [f"r{round_}-{n:02d}" for n in range(PARALLEL)]

        def send(text, chat_id=chat_id):
            return session.post(url, json={"chat_id": chat_id, "text": text},
                                headers={"X-API-Key": chat_key}, timeout=60)

        with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            responses = list(pool.map(send, texts))
        assert [r.status_code for r in responses] == [202] * PARALLEL, [r.text for r in responses if r.status_code != 202]
        answers = [r.json() for r in responses]
        assert len({(a["binding_id"], a["instance_id"]) for a in answers}) == 1, answers
        binding_id, instance_id = answers[0]["binding_id"], answers[0]["instance_id"]
        variables = eventually(lambda: variables_of(api, instance_id), lambda v: len(v.get("texts", [])) == PARALLEL)
        assert variables["texts"] == [text for _, text in _in_message_ids_oldest_first(api, binding_id)]
    active = conversations_on(api, collecting["config_id"])
    assert sorted(c["chat_id"] for c in active) == sorted(f"race-{n}" for n in range(ROUNDS))


def test_parallel_messages_to_a_chat_whose_process_ends_at_once_never_fail(server, api, chat_key, unique_code):  # noqa: F811
    """chat_reply ends at the second message: conversations open and close under the burst, and every
    message is still accepted (or joins an open one), never a 500."""
    from tests.integration.test_webchat import create_channel, deploy_chat
    config = create_channel(api)
    deploy_chat(api, "chat_reply.bpmn", config["name"], unique_code)
    url = f"{server.base_url}/channels/webchat/{config['config_id']}/inbound"
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_connections=PARALLEL, pool_maxsize=PARALLEL))
    for round_ in range(ROUNDS):
        def send(n, chat_id=f"churn-{round_}"):
            return session.post(url, json={"chat_id": chat_id, "text": f"t{n}"},
                                headers={"X-API-Key": chat_key}, timeout=60)

        with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            responses = list(pool.map(send, range(PARALLEL)))
        assert [r.status_code for r in responses] == [202] * PARALLEL, [r.text for r in responses if r.status_code != 202]
