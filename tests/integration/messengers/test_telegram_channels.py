"""A Telegram channel's life against the fake Bot API: connected in one call (getMe + setWebhook),
refusals that store nothing, get/list without secrets, update and delete (re)registering, and two
tenants registering the same bot: neither ever receives the other's traffic."""
from __future__ import annotations

import json

import pytest
import requests

from tests.fakes.server import Reply
from tests.harness import RpcError
from tests.integration.messengers.helpers import (conversations_of, deploy_on, eventually, new_chat_id,
                                                  new_name)


def create(api, fake, token: str | None = None, **params) -> tuple[dict, str]:
    token = token or fake.add_bot("Acme Support", username=new_name("acme").replace("-", "_") + "_bot")
    channel = api.call("channel.create", type="telegram", name=params.pop("name", new_name("tg")),
                       settings={"bot_token": token}, **params)
    return channel, token


def rpc_error(call, *args, **kwargs) -> RpcError:
    with pytest.raises(RpcError) as caught:
        call(*args, **kwargs)
    return caught.value


def names(api) -> list[str]:
    return [c["name"] for c in api.call("channel.list", per_page=100)["items"]]


def test_create_checks_the_token_registers_the_webhook_and_never_shows_a_secret(mapi, fakes, messenger_server):
    fake = fakes.telegram
    channel, token = create(mapi, fake)
    hook = fake.webhooks[token]
    assert hook["url"] == channel["webhook_url"]
    assert hook["url"].startswith(f"{messenger_server.base_url}/webhooks/telegram?channel=")
    assert hook["allowed_updates"] == ["message", "edited_message", "callback_query", "my_chat_member"]
    key, _, rest = hook["secret_token"].partition("_")
    assert len(key) == 16 and len(rest) >= 40 and hook["url"].endswith(f"channel={key}")
    assert [r.path.rsplit("/", 1)[1] for r in fake.requests if token in r.path] == ["getMe", "setWebhook"]

    shown = mapi.call("channel.get", config_id=channel["config_id"])
    assert shown == channel
    assert (shown["type"], shown["enabled"], shown["bot_name"], shown["settings"]) == (
        "telegram", True, "Acme Support", {})
    assert shown["bot_id"] == token.split(":")[0] and shown["bot_username"].endswith("_bot")
    assert shown["registered_at"] and shown["last_error"] is None
    listed = [c for c in mapi.call("channel.list", type="telegram", per_page=100)["items"]
              if c["config_id"] == channel["config_id"]]
    assert listed == [shown]
    for answer in (channel, shown, listed):
        text = json.dumps(answer)
        assert token not in text and hook["secret_token"] not in text


@pytest.mark.parametrize("settings, param, phrase", [
    ({}, "settings.bot_token", "Missing setting(s) 'bot_token'"),
    ({"bot_token": "1:" + "a" * 30, "chat": "x"}, "settings", "Unknown setting(s) 'chat'"),
    ({"bot_token": "not a token"}, "settings.bot_token", "does not look like a bot token"),
    ({"bot_token": 42}, "settings.bot_token", "must be a string"),
])
def test_bad_settings_are_refused_before_telegram_is_called(mapi, fakes, settings, param, phrase):
    before = len(fakes.telegram.requests)
    name = new_name("bad")
    error = rpc_error(mapi.call, "channel.create", type="telegram", name=name, settings=settings)
    assert (error.reason, error.data.get("param")) == ("invalid_params", param) and phrase in error.message
    assert len(fakes.telegram.requests) == before and name not in names(mapi)


def test_a_token_telegram_refuses_is_invalid_params_quoting_it_and_nothing_is_stored(mapi, fakes):
    name = new_name("refused")
    error = rpc_error(mapi.call, "channel.create", type="telegram", name=name,
                      settings={"bot_token": "123456:" + "x" * 35})
    assert (error.reason, error.data["param"]) == ("invalid_params", "settings.bot_token")
    assert error.message == "Telegram refused the bot_token: Unauthorized" and name not in names(mapi)


def test_a_webhook_telegram_refuses_stores_nothing_and_registers_nothing(mapi, fakes):
    fake = fakes.telegram
    token = fake.add_bot()
    fake.script(Reply(400, {"ok": False, "error_code": 400, "description": "Bad Request: bad webhook: "
                            "An HTTPS URL must be provided for webhook"}), path_endswith=f"{token}/setWebhook")
    name = new_name("no-https")
    error = rpc_error(mapi.call, "channel.create", type="telegram", name=name, settings={"bot_token": token})
    assert error.reason == "invalid_params" and error.data["param"] == "webhook_url"
    assert "An HTTPS URL must be provided for webhook" in error.message and token not in error.message
    assert name not in names(mapi) and token not in fake.webhooks


def test_telegram_out_of_reach_is_messenger_unavailable_and_nothing_is_stored(mapi, fakes):
    fake = fakes.telegram
    token = fake.add_bot()
    fake.script(Reply(502, b"<html>Bad Gateway</html>"), path_endswith=f"{token}/getMe")
    name = new_name("down")
    error = rpc_error(mapi.call, "channel.create", type="telegram", name=name, settings={"bot_token": token})
    assert error.reason == "messenger_unavailable" and error.code == -32603
    assert error.message.startswith("Telegram answered HTTP 502") and "nothing was changed" in error.message
    assert name not in names(mapi) and token not in fake.webhooks


def test_a_taken_name_is_refused_before_telegram_is_called(mapi, fakes):
    channel, _ = create(mapi, fakes.telegram)
    token = fakes.telegram.add_bot()
    error = rpc_error(create, mapi, fakes.telegram, token, name=channel["name"])
    assert error.reason == "conflict" and token not in fakes.telegram.webhooks


def test_webchat_parameters_are_refused_for_a_messenger(mapi, fakes):
    error = rpc_error(mapi.call, "channel.create", type="telegram", name=new_name("x"),
                      settings={"bot_token": fakes.telegram.add_bot()}, webhook_url="https://example.com/x")
    assert error.data["param"] == "webhook_url" and "registers its own webhook" in error.message


def test_disable_unregisters_enable_registers_again_and_a_new_token_moves_the_webhook(mapi, fakes):
    fake = fakes.telegram
    channel, token = create(mapi, fake)
    config_id = channel["config_id"]
    disabled = mapi.call("channel.update", config_id=config_id, enabled=False)
    assert disabled["enabled"] is False and token not in fake.webhooks       # deleteWebhook
    enabled = mapi.call("channel.update", config_id=config_id, enabled=True)
    assert fake.webhooks[token]["url"] == enabled["webhook_url"] != channel["webhook_url"]  # a new key and secret

    new_token = fake.add_bot("Acme Two")
    moved = mapi.call("channel.update", config_id=config_id, settings={"bot_token": new_token}, name=new_name("tg2"))
    assert moved["bot_name"] == "Acme Two" and fake.webhooks[new_token]["url"] == moved["webhook_url"]
    assert token not in fake.webhooks                                        # the old bot's, still ours: removed
    assert new_token not in json.dumps(moved) and "warning" not in moved

    error = rpc_error(mapi.call, "channel.update", config_id=config_id, settings={"bot_token": "1:" + "z" * 30})
    assert error.reason == "invalid_params"
    assert mapi.call("channel.get", config_id=config_id) == {k: v for k, v in moved.items() if k != "warning"}


def test_delete_removes_the_webhook_and_the_old_secret_opens_nothing(mapi, fakes, messenger_server):
    fake = fakes.telegram
    channel, token = create(mapi, fake)
    hook = dict(fake.webhooks[token])
    assert mapi.call("channel.delete", config_id=channel["config_id"]) == {"config_id": channel["config_id"],
                                                                           "deleted": True}
    assert token not in fake.webhooks
    update = fake.text_update(new_chat_id(), "still there?")
    answer = requests.post(hook["url"], json=update, timeout=10,
                           headers={"X-Telegram-Bot-Api-Secret-Token": hook["secret_token"]})
    assert answer.status_code == 401


def test_two_tenants_with_the_same_bot_never_receive_each_others_traffic(mapi, other_mapi, fakes):
    """A bot has one webhook: the channel registered last receives its updates. The other one
    receives none from then on, an update signed for one channel never reaches the other, and
    deleting the channel that lost the webhook leaves the winner's registration alone."""
    fake = fakes.telegram
    first, token = create(mapi, fake)
    deploy_on(mapi, "chat_reply.bpmn", first)
    first_hook = dict(fake.webhooks[token])
    second, _ = create(other_mapi, fake, token)
    deploy_on(other_mapi, "chat_reply.bpmn", second)
    assert fake.webhooks[token]["url"] == second["webhook_url"] != first["webhook_url"]

    chat = new_chat_id()
    assert fake.deliver(token, fake.text_update(chat, "for whoever holds the bot")).status_code == 200
    [theirs] = eventually(lambda: conversations_of(other_mapi, second["config_id"]), lambda found: len(found) == 1)
    assert theirs["chat_id"] == str(chat)
    mapi.wait_until_idle()
    assert conversations_of(mapi, first["config_id"]) == []

    # An update sent with the first channel's own secret (one in flight before the switch) is its alone.
    late = fake.text_update(chat, "sent before the switch")
    answer = requests.post(first_hook["url"], json=late, timeout=10,
                           headers={"X-Telegram-Bot-Api-Secret-Token": first_hook["secret_token"]})
    assert answer.status_code == 200
    [mine] = eventually(lambda: conversations_of(mapi, first["config_id"]), lambda found: len(found) == 1)
    assert mine["binding_id"] != theirs["binding_id"]
    assert [m["text"] for m in other_mapi.call("conversation.messages", binding_id=theirs["binding_id"])["items"]
            if m["direction"] == "in"] == ["for whoever holds the bot"]
    assert rpc_error(mapi.call, "conversation.messages", binding_id=theirs["binding_id"]).reason == "not_found"
    assert rpc_error(mapi.call, "channel.get", config_id=second["config_id"]).reason == "not_found"

    mapi.call("process.cancel", instance_id=mine["instance_id"])
    mapi.call("channel.delete", config_id=first["config_id"])
    assert fake.webhooks[token]["url"] == second["webhook_url"]   # not the first channel's to remove
