"""A web-chat receiver outage, end to end through a real server: the scenario of the drain test
(tests/integration/test_delivery_drain.py) and of its full-size bench (bench/delivery_drain.py).

While the channel's receiver answers 503, ``chats`` customers each write once; each chat's instance
answers with ``per_chat`` numbered messages (tests/bpmn/chat_burst.bpmn). Every chat's first
answer fails and waits out its retry delay. Then the receiver is back and one more chat writes: its
first answer is the first success, and the drain brings every waiting answer forward. The result
says how far away the next scheduled retry was when the receiver came back, how long the backlog
took from the first success to the last arrival, and whether every answer arrived once, in order.
"""
from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone

import requests

from tests.harness import bpmn
from tests.receiver import Answer, Receiver


@dataclass
class OutageResult:
    messages: int                  # answers the receiver took (2xx) after it came back
    expected: int
    next_retry_s: float            # when it came back: seconds until the earliest scheduled retry
    drain_s: float                 # first success -> last arrival
    duplicates: list = field(default_factory=list)   # delivery ids taken more than once
    out_of_order: dict = field(default_factory=dict)  # chat -> the order its answers arrived in


def _queued_on(api, channel_id: int) -> list[dict]:
    items, page = [], 1
    while True:
        listed = api.call("delivery.list", status="queued", per_page=100, page=page)
        items += [item for item in listed["items"] if item["channel_id"] == channel_id]
        if page * 100 >= listed["total"]:
            return items
        page += 1


def _seconds_until(stamp: str) -> float:
    return (datetime.fromisoformat(stamp.replace("Z", "+00:00")) - datetime.now(timezone.utc)).total_seconds()


def run_outage(server, api, receiver: Receiver, *, chats: int, per_chat: int, down_s: float = 0.0,
               drain_timeout_s: float = 60.0, outage: bool = True) -> OutageResult:
    """Run the outage on ``server`` (its delivery schedule decides how far away the retries are).
    ``down_s``: keep the receiver down at least this long (the heads retry meanwhile). Without
    ``outage`` the receiver is up all along: the same answers, the baseline of a bench."""
    chat_key = api.call("apikey.create", name="site backend", permissions=["conversation.send"])["api_key"]
    channel = api.call("channel.create", type="webchat", name=f"outage-{uuid.uuid4().hex[:8]}",
                       webhook_url=receiver.url + "/chat")
    xml = bpmn("chat_burst.bpmn").replace("__CHANNEL__", channel["name"]).replace("__COUNT__", str(per_chat))
    api.deploy(xml, code=f"burst-{uuid.uuid4().hex[:8]}")
    receiver.default = Answer(503 if outage else 200)
    went_down = time.monotonic()

    def write(chat_id: str) -> None:
        response = requests.post(f"{server.base_url}/channels/webchat/{channel['config_id']}/inbound",
                                 json={"chat_id": chat_id, "text": "hello"}, headers={"X-API-Key": chat_key},
                                 timeout=30)
        assert response.status_code == 202, response.text

    for number in range(chats):
        write(f"chat-{number:03d}")
    deadline = time.monotonic() + 60 + down_s
    waiting: list[dict] = []
    while outage:  # every chat's head has failed and waits out its delay (the others wait behind it)
        queued = _queued_on(api, channel["config_id"])
        # (An attempt on the wire shows its attempts already counted and the last due time, now past.)
        waiting = [item for item in queued if item["attempts"] > 0 and item["next_attempt_at"]
                   and _seconds_until(item["next_attempt_at"]) > 0]
        if len(queued) == chats * per_chat and len(waiting) == chats and time.monotonic() - went_down >= down_s:
            break
        assert time.monotonic() < deadline, f"{len(waiting)} of {chats} heads wait, {len(queued)} queued"
        time.sleep(0.1)
    failed_before = len(receiver.requests) if outage else 0
    receiver.default = Answer(200)                      # the receiver is back
    next_retry_s = min(_seconds_until(item["next_attempt_at"]) for item in waiting) if outage else float("nan")
    write("chat-first")
    expected = (chats + 1) * per_chat
    receiver.wait_for(failed_before + expected, timeout=drain_timeout_s)
    api.wait_until_idle()                               # anything sent twice has arrived by now
    taken = receiver.requests[failed_before:]
    drain_s = taken[-1].at - taken[0].at
    uids = Counter(r.headers.get("X-Baton-Delivery") for r in taken)
    by_chat = defaultdict(list)
    for request in taken:
        by_chat[request.json()["chat_id"]].append(request.json()["text"])
    in_order = [f"answer {n}" for n in range(per_chat)]
    return OutageResult(messages=len(taken), expected=expected, next_retry_s=next_retry_s, drain_s=drain_s,
                        duplicates=[uid for uid, count in uids.items() if count > 1],
                        out_of_order={chat: texts for chat, texts in by_chat.items() if texts != in_order})
