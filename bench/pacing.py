"""Pacing: a burst of replies against a fake Telegram that enforces Telegram's limits.

For each backend a fresh server (``flask --app app serve`` as ``make run`` starts it, the documented
default limits: 30 messages/s per bot, 1/s per chat) and database, and a fake Bot API that answers
429 (with ``retry_after``) to anything over those limits (token buckets, ``tests/fakes/server.py``).
``--chats`` customers write (a process bound to the bot waits for an operator), then
``--replies`` operator replies to them, round robin, are queued at once (``conversation.send`` in
JSON-RPC batches of 100). Measured: from the first batch sent to the last reply the fake took.

The time the limits allow is what the tighter of them needs: (replies - 1) / per-bot rate, or
(replies per chat - 1) / per-chat rate. Printed: the burst's time, the ratio to that, the 429s,
and whether every chat got its replies once, in order. Target (issue 28): no 429 and a ratio
of at most 1.15. Results: bench/results/pacing-latest.json.

    python bench/pacing.py                                   # 1,000 replies to 100 chats, both backends
    python bench/pacing.py --backends sqlite --replies 300 --chats 30
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import run_header  # noqa: E402
from tests.fakes.telegram import FakeTelegram  # noqa: E402
from tests.harness import (BatonServer, bpmn, create_postgres_database, drop_postgres_database,  # noqa: E402
                           eventually)

RESULTS = ROOT / "bench" / "results" / "pacing-latest.json"
PER_BOT, PER_CHAT = 30.0, 1.0      # Telegram's limits, Baton's defaults (docs/operations.md)
TARGET_RATIO = 1.15
BATCH = 100


def measure(backend: str, args, workdir: Path) -> dict:
    url = f"sqlite:///{workdir / backend / 'baton.db'}" if backend == "sqlite" else create_postgres_database()
    (workdir / backend).mkdir(exist_ok=True)
    fake = FakeTelegram().start()
    server = BatonServer(url, workdir / backend, BATON_TELEGRAM_API_URL=fake.api_url).start()
    try:
        api = server.api(server.create_tenant("bench"))
        token = fake.add_bot("Bench Bot")
        channel = api.call("channel.create", type="telegram", name=f"tg-{uuid.uuid4().hex[:6]}",
                           settings={"bot_token": token})
        api.deploy(bpmn("chat_operator.bpmn").replace('value="webchat"', 'value="telegram"')
                   .replace("__CHANNEL__", channel["name"]), code="bench-pacing")
        chats = [10**9 + n for n in range(args.chats)]
        for chat in chats:
            assert fake.deliver(token, fake.text_update(chat, "hi")).status_code == 200
        bindings = eventually(lambda: (lambda found: found if len(found) == len(chats) else None)(
            {int(c["chat_id"]): c["binding_id"] for c in api.call("conversation.list", per_page=100)["items"]}
            if len(chats) <= 100 else _all_bindings(api)), 60, "the conversations", every_s=0.05)
        api.wait_until_idle()
        limiter = fake.enforce_limits(PER_BOT, PER_CHAT)

        replies = [(chats[n % len(chats)], f"reply {n // len(chats)} to {chats[n % len(chats)]}")
                   for n in range(args.replies)]
        started = time.time()
        for first in range(0, len(replies), BATCH):
            answers = api.post([{"jsonrpc": "2.0", "id": first + index, "method": "conversation.send",
                                 "params": {"binding_id": bindings[chat], "text": text}}
                                for index, (chat, text) in enumerate(replies[first:first + BATCH])]).json()
            assert all("result" in answer for answer in answers), answers[:2]
        queued_s = time.time() - started
        eventually(lambda: len(fake.sent) >= len(replies), args.replies / PER_BOT * 4 + 60, "every reply", every_s=0.05)
        elapsed = max(fake.sent_times) - started
        per_chat = collections.defaultdict(list)
        for sent in fake.sent:
            per_chat[int(sent["chat_id"])].append(sent["text"])
        expected = collections.defaultdict(list)
        for chat, text in replies:
            expected[chat].append(text)
        replies_per_chat = max(len(texts) for texts in expected.values())
        allowed = max((len(replies) - 1) / PER_BOT, (replies_per_chat - 1) / PER_CHAT)
        ratio = elapsed / allowed
        once_in_order = dict(per_chat) == dict(expected)
        return {"replies": len(replies), "chats": len(chats), "queued_s": round(queued_s, 2),
                "burst_s": round(elapsed, 2), "allowed_s": round(allowed, 2), "ratio": round(ratio, 3),
                "refused_429": limiter.refused, "all_once_in_order": once_in_order,
                "target_met": once_in_order and limiter.refused == 0 and ratio <= TARGET_RATIO}
    finally:
        server.stop()
        fake.stop()
        if backend == "postgresql":
            drop_postgres_database(url)


def _all_bindings(api) -> dict[int, int]:
    found, page = {}, 1
    while True:
        answer = api.call("conversation.list", page=page, per_page=100)
        found.update({int(c["chat_id"]): c["binding_id"] for c in answer["items"]})
        if not answer["items"] or len(found) >= answer["total"]:
            return found
        page += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--replies", type=int, default=1000)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = os.getloadavg()
    started = time.monotonic()
    results = {}
    with tempfile.TemporaryDirectory(prefix="baton-pacing-") as tmp:
        for backend in args.backends.split(","):
            print(f"{backend}: {args.replies} replies to {args.chats} chats, Telegram's limits enforced ...", flush=True)
            row = results[backend] = measure(backend, args, Path(tmp))
            print(f"  burst {row['burst_s']:.2f} s (queued in {row['queued_s']:.2f} s); the limits allow "
                  f"{row['allowed_s']:.2f} s: ratio {row['ratio']:.3f} (target <= {TARGET_RATIO}); "
                  f"429s {row['refused_429']}; all once, in order: {row['all_once_in_order']}", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({**run_header(load_before, postgresql="postgresql" in results),
                                       "run_seconds": round(time.monotonic() - started, 1),
                                       "options": {k: str(v) for k, v in vars(args).items()},
                                       "backends": results}, indent=2) + "\n")
    return 0 if all(r["target_met"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
