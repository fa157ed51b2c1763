"""A messenger channel's administration in the audit log (issue 29): connecting a bot and changing its
token (a change that calls Telegram between two transactions) are recorded with the channel's id,
in the transaction that stores them, and no token appears in the log."""
from __future__ import annotations

import json

from tests.integration.messengers.helpers import new_name


def test_connecting_and_reconnecting_a_bot_are_audited_without_its_tokens(mapi, fakes):
    fake = fakes.telegram
    first = fake.add_bot("Audited", username=new_name("audited").replace("-", "_") + "_bot")
    channel = mapi.call("channel.create", type="telegram", name=new_name("tg"), settings={"bot_token": first})
    second = fake.add_bot("Audited 2", username=new_name("audited").replace("-", "_") + "_bot")
    mapi.call("channel.update", config_id=channel["config_id"], settings={"bot_token": second})
    entries = mapi.call("audit.list", per_page=100)["items"]
    mine = [e for e in entries if e["target"] == {"kind": "channel", "id": str(channel["config_id"])}]
    assert [e["method"] for e in mine] == ["channel.update", "channel.create"]
    text = json.dumps(entries)
    for secret in (first, second, fake.webhooks[second]["secret_token"]):
        assert secret not in text
