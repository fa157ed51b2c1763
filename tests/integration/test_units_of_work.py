"""One place commits per request or job (``engine.store.unit_of_work``), counted on a real server by
``baton_transactions_total{owner}``: a webhook start is one commit of the webhook door and its
advance one commit of the job; a JSON-RPC call is one commit of the endpoint; a task's completion
adds one commit for the advance it causes."""
from __future__ import annotations

import requests

from tests.harness import bpmn
from tests.integration.test_metrics import moved, scrape


def _commits(before: dict, after: dict, owner: str) -> float:
    return moved(before, after, f'baton_transactions_total{{owner="{owner}"}}')


def test_a_webhook_start_commits_once_at_the_door_and_once_for_its_advance(server, api, unique_code):
    hook = api.deploy(bpmn("webhook_order.bpmn"), code=unique_code)["webhooks"][0]["url"]
    api.wait_until_idle()
    before = scrape(server.base_url)
    answer = requests.post(hook, json={"amount": 70}, timeout=10)
    assert answer.status_code == 202
    assert api.wait_for(answer.json()["instance_id"])["status"] == "completed"
    api.wait_until_idle()
    after = scrape(server.base_url)
    assert _commits(before, after, "webhook") == 1
    assert _commits(before, after, "job:start") == 1   # start -> script -> gateway -> end: one advance


def test_an_rpc_call_commits_once_and_each_advance_it_causes_once(server, api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    api.wait_until_idle()
    before = scrape(server.base_url)
    started = api.call("process.start", definition_id=unique_code, variables={})
    assert _commits(before, scrape(server.base_url), "rpc") == 1
    api.wait_until_idle()
    assert _commits(before, scrape(server.base_url), "job:start") == 1

    [task] = api.call("task.list", instance_id=started["instance_id"], status="in_progress")["items"]
    before = scrape(server.base_url)
    api.call("task.complete", task_id=task["task_id"], result={})
    assert _commits(before, scrape(server.base_url), "rpc") == 1
    api.wait_until_idle()
    after = scrape(server.base_url)
    assert _commits(before, after, "job:complete_task") == 1
    assert api.call("process.status", instance_id=started["instance_id"])["status"] == "completed"
