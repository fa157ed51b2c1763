"""One pass over Baton's main paths through the real server (the fast loop, ``make check``, runs it
on SQLite): deploy, a webhook start that completes, a human task completed over JSON-RPC, a chat
message answered at the channel's webhook."""
from __future__ import annotations

import requests

from tests.harness import bpmn
from tests.integration.test_webchat import accepted, create_channel, deploy_chat, eventually


def test_a_webhook_start_runs_to_completion(api, unique_code):
    deployed = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)
    response = requests.post(deployed["webhooks"][0]["url"], json={"amount": 70}, timeout=30)
    assert response.status_code == 202, response.text
    done = api.wait_for(response.json()["instance_id"])
    assert (done["status"], done["variables"]) == ("completed", {"total": 140, "label": "big"})


def test_a_human_task_is_listed_and_its_completion_finishes_the_instance(api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"order": 7})["instance_id"]
    [task] = eventually(lambda: api.call("task.list", instance_id=instance_id)["items"], bool)
    api.call("task.complete", task_id=task["task_id"], result={"approved": True})
    assert api.wait_for(instance_id)["status"] == "completed"


def test_a_chat_message_is_answered_at_the_channel_webhook(server, api, receiver, unique_code):
    channel = create_channel(api, webhook_url=receiver.url + "/chat")
    deploy_chat(api, "chat_reply.bpmn", channel["config_id"], unique_code)
    key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    accepted(server, key, channel["config_id"], chat_id="smoke-1", text="hello")
    [answer] = receiver.wait_for(1)
    assert answer.json()["chat_id"] == "smoke-1" and answer.json()["text"]
