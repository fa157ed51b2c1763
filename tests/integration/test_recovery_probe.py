"""Recovery without new traffic (issue 29, point 5), SQLite and PostgreSQL: while a destination is down,
one of its failing deliveries is tried every ``BATON_DELIVERY_PROBE_S`` (15 s; 5 s here, so that the
outage and the test stay short); the first of those tries
after the receiver is back succeeds and drains the backlog, so it arrives within about two probe
intervals of the return, with no new message, each chat's answers in order, none twice.

The schedule is stretched (BATON_DELIVERY_RETRY_SCALE=20: the first retry 100 s after the first
failure, the second 600 s): the test checks the waiting deliveries' next scheduled attempts are far
away when the receiver comes back, so the recovery cannot be the schedule's doing. The outage is
kept short (the receiver down for about 9 s, bounded by the deadlines below).
"""
from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict

import pytest
import requests

from tests.harness import BatonServer, bpmn
from tests.integration.test_headless_tasks import _BUTTONS
from tests.outage import _queued_on, _seconds_until
from tests.receiver import Answer, Receiver

PROBE_S = 5.0
DOWN_S = 9.0
CHATS, PER_CHAT = 4, 3


@pytest.fixture(params=["0", "2"], ids=["threads", "two-worker-processes"])
def stretched(request, own_database, tmp_path):
    """The server, its workers as threads or as two worker processes (one probe across both)."""
    server = BatonServer(own_database, tmp_path, BATON_DELIVERY_RETRY_SCALE="20",
                         BATON_DELIVERY_PROBE_S=str(PROBE_S), BATON_WORKER_PROCESSES=request.param).start()
    yield server
    server.stop()


@pytest.fixture
def down_receiver():
    receiver = Receiver(Answer(503)).start()
    yield receiver
    receiver.stop()


def _wait_until_every_head_waits(api, channel_id, heads: int, total: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        queued = _queued_on(api, channel_id) if channel_id is not None else _queued_channelless(api)
        waiting = [item for item in queued if item["attempts"] > 0 and item["next_attempt_at"]
                   and _seconds_until(item["next_attempt_at"]) > 0]
        if len(queued) == total and len(waiting) == heads:
            return
        assert time.monotonic() < deadline, f"{len(waiting)} of {heads} heads wait, {len(queued)} queued"
        time.sleep(0.1)


def _queued_channelless(api) -> list[dict]:
    return [item for item in api.call("delivery.list", status="queued", per_page=100)["items"]
            if item["channel_id"] is None]


def _recover(api, receiver: Receiver, channel_id: int | None, expected: int) -> dict:
    """Keep the receiver down until ``DOWN_S`` have passed, then bring it back and send nothing:
    how long until the last delivery arrived, the schedule's next attempt then, what was taken."""
    went_down = min(r.at for r in receiver.requests)
    time.sleep(max(0.0, went_down + DOWN_S - time.time()))
    failed = len(receiver.requests)
    first_tries: dict[str, float] = {}
    for request in receiver.requests:
        first_tries.setdefault(request.headers.get("X-Baton-Delivery"), request.at)
    wave_end = max(first_tries.values())  # every head has failed once by then: what follows are probes
    probes_while_down = Counter(r.headers.get("X-Baton-Delivery") for r in receiver.requests[:failed]
                                if r.at > wave_end)
    # The schedule of every failed delivery but the probe's, as the receiver comes back.
    queued = _queued_on(api, channel_id) if channel_id is not None else _queued_channelless(api)
    schedule_s = min(_seconds_until(item["next_attempt_at"]) for item in queued if item["attempts"] > 0
                     and item["next_attempt_at"] and item["delivery_uid"] not in probes_while_down)
    receiver.default = Answer(200)
    back = time.time()
    receiver.wait_for(failed + expected, timeout=4 * PROBE_S)
    api.wait_until_idle()
    taken = receiver.requests[failed:]
    return {"recovered_s": taken[-1].at - back, "schedule_s": schedule_s, "taken": taken,
            "probes_while_down": probes_while_down}


def test_a_web_chat_receiver_back_gets_its_backlog_within_two_probes_without_new_traffic(stretched, down_receiver):
    server, receiver = stretched, down_receiver
    api = server.api(server.create_tenant(f"probe-{uuid.uuid4().hex[:6]}"))
    chat_key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    channel = api.call("channel.create", type="webchat", name=f"probe-{uuid.uuid4().hex[:8]}",
                       webhook_url=receiver.url + "/chat")
    api.deploy(bpmn("chat_burst.bpmn").replace("__CHANNEL__", channel["name"]).replace("__COUNT__", str(PER_CHAT)),
               code="burst")
    for number in range(CHATS):
        answer = requests.post(f"{server.base_url}/channels/webchat/{channel['config_id']}/inbound",
                               json={"chat_id": f"chat-{number}", "text": "hello"}, headers={"X-API-Key": chat_key},
                               timeout=30)
        assert answer.status_code == 202, answer.text
    _wait_until_every_head_waits(api, channel["config_id"], CHATS, CHATS * PER_CHAT)
    result = _recover(api, receiver, channel["config_id"], CHATS * PER_CHAT)

    # While down, one delivery probed the destination, not every chat's head.
    assert len(result["probes_while_down"]) == 1 and sum(result["probes_while_down"].values()) >= 1, result
    # Back: the schedule's next attempt was minutes away, the backlog came within two probe intervals.
    assert result["schedule_s"] > 4 * PROBE_S, result
    assert result["recovered_s"] < 2 * PROBE_S < result["schedule_s"] / 2, result
    taken = result["taken"]
    assert len(taken) == CHATS * PER_CHAT
    assert not [uid for uid, n in Counter(r.headers.get("X-Baton-Delivery") for r in taken).items() if n > 1]
    by_chat = defaultdict(list)
    for request in taken:
        by_chat[request.json()["chat_id"]].append(request.json()["text"])
    assert all(texts == [f"answer {n}" for n in range(PER_CHAT)] for texts in by_chat.values()), by_chat


def test_a_crm_url_back_gets_its_task_events_within_two_probes(stretched, down_receiver):
    server, crm = stretched, down_receiver
    api = server.api(server.create_tenant(f"probe-{uuid.uuid4().hex[:6]}"))
    xml = bpmn("approval_form.bpmn").replace(
        _BUTTONS, _BUTTONS + f'<camunda:property name="crm_webhook" value="{crm.url}/crm/events" />')
    api.deploy(xml, code="approval")
    instances = 3
    for order in range(instances):
        api.call("process.start", definition_id="approval", variables={"customer": "Zoë", "order": order})
    _wait_until_every_head_waits(api, None, instances, instances)
    result = _recover(api, crm, None, instances)
    # One prober, whichever worker process recorded the wave's failures first.
    assert len(result["probes_while_down"]) == 1, result
    assert result["schedule_s"] > 4 * PROBE_S, result
    assert result["recovered_s"] < 2 * PROBE_S < result["schedule_s"] / 2, result
    events = [r.json() for r in result["taken"]]
    assert sorted(e["variables"]["order"] for e in events) == list(range(instances))
