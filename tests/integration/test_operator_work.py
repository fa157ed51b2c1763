"""Operator work over real HTTP, on SQLite and PostgreSQL: assignment from the model, operators'
keys, claims (two at once: one wins), hand-over, due dates and overdue tasks, the inbox filters and
sorts of task.list, and /metrics."""
from __future__ import annotations

import concurrent.futures
import datetime as dt
import threading
import time
import uuid

import pytest
import requests

from tests.harness import Api, RpcError, bpmn


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


WORKER = ("task.list", "task.claim", "task.unclaim", "task.complete")  # not task.assign


def operator(server, api, user=None, groups=None, permissions=WORKER) -> Api:
    params = {"name": f"key of {user or 'nobody'}", "permissions": list(permissions)}
    if user is not None:
        params["user"] = user
    if groups is not None:
        params["groups"] = groups
    return server.api(api.call("apikey.create", **params)["api_key"])


def open_tasks(api, instance_id, count=1, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = api.call("task.list", instance_id=instance_id, status="in_progress")["items"]
        if len(items) >= count:
            return items
        time.sleep(0.02)
    raise AssertionError(f"no open task for instance {instance_id}")


def start(api, code, **variables):
    return api.call("process.start", definition_id=code, variables=variables)["instance_id"]


@pytest.fixture
def review(api, unique_code):
    api.deploy(bpmn("assigned_review.bpmn"), code=unique_code)
    return unique_code


def iso_in(hours: float) -> str:
    return (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_assignment_due_dates_and_priority_come_from_the_model_and_its_expressions(api, review):
    region = _name("north")
    instance_id = start(api, review, requester="alice", region=region, due="2030-01-02T03:04:05+02:00",
                        urgency=70)
    task = open_tasks(api, instance_id)[0]
    assert task["assignee"] == "alice"
    assert task["candidate_users"] == ["bob", "carol"]
    assert task["candidate_groups"] == ["sales", f"team-{region}"]
    assert task["due_at"] == "2030-01-02T01:04:05.000Z"
    assert task["priority"] == 70
    created = dt.datetime.fromisoformat(task["created_at"].replace("Z", "+00:00"))
    follow_up = dt.datetime.fromisoformat(task["follow_up_at"].replace("Z", "+00:00"))
    assert dt.timedelta(minutes=59) < follow_up - created < dt.timedelta(minutes=61)
    assert task["form_schema"] is None


def test_a_setting_that_cannot_be_evaluated_leaves_its_field_unset_and_the_task_opens(api, review):
    instance_id = start(api, review, region="south", urgency="very")  # no requester, no due, a word for a priority
    task = open_tasks(api, instance_id)[0]
    assert task["assignee"] is None and task["due_at"] is None and task["priority"] == 50
    assert task["candidate_groups"] == ["sales", "team-south"]


def test_a_lane_named_like_a_group_makes_its_tasks_candidates_of_that_group(api, unique_code):
    api.deploy(bpmn("lane_approval.bpmn"), code=unique_code)
    instance_id = start(api, unique_code)
    task = open_tasks(api, instance_id)[0]
    assert task["element_id"] == "approve"
    assert task["candidate_groups"] == ["finance"] and task["candidate_users"] == []
    assert task["due_at"] == "2020-01-01T09:00:00.000Z" and task["priority"] == 80
    api.call("task.complete", task_id=task["task_id"])
    answer = open_tasks(api, instance_id)[0]
    # Its own candidates win over its lane's.
    assert answer["element_id"] == "answer" and answer["candidate_users"] == ["dora"]
    assert answer["candidate_groups"] == []


@pytest.mark.parametrize("attribute, value, phrase", [
    ("camunda:assignee", "${manager.lookup(requester)}", "the method call lookup(...)"),
    ("camunda:priority", "120", "a priority is from 0 to 100, not 120"),
    ("camunda:dueDate", "next friday", "neither an ISO 8601 date-time"),
    ("camunda:candidateGroups", "sales, ${execution.getVariable('x')}", "the method call getVariable(...)"),
])
def test_what_cannot_be_evaluated_is_refused_at_deploy_naming_the_element(api, attribute, value, phrase):
    xml = bpmn("assigned_review.bpmn")
    for name in ("assignee", "candidateUsers", "candidateGroups", "dueDate", "followUpDate", "priority"):
        xml = xml.replace(f'camunda:{name}="', f'data-{name}="')
    xml = xml.replace('name="Review the claim"', f'name="Review the claim" {attribute}="{value}"')
    with pytest.raises(RpcError) as caught:
        api.deploy(xml, code=_name("refused"))
    assert caught.value.reason == "invalid_params"
    errors = caught.value.data["errors"]
    assert errors[0]["element_id"] == "review" and 8 <= errors[0]["line"] <= 14
    assert phrase in errors[0]["message"], errors


def test_api_keys_carry_an_operator_that_whoami_and_the_key_list_show(server, api):
    alice = operator(server, api, "alice", ["sales", "vip"])
    me = alice.call("auth.whoami")
    assert (me["user"], me["groups"]) == ("alice", ["sales", "vip"])
    listed = {key["name"]: key for key in api.call("apikey.list", per_page=100)["items"]}
    assert listed["key of alice"]["user"] == "alice" and listed["key of alice"]["groups"] == ["sales", "vip"]
    assert api.call("auth.whoami")["user"] is None


@pytest.mark.parametrize("params, param", [
    ({"user": 7}, "user"), ({"user": ""}, "user"), ({"user": "a,b"}, "user"),
    ({"groups": "sales"}, "groups"), ({"groups": ["sales", 3]}, "groups[1]"), ({"groups": [""]}, "groups[0]"),
])
def test_a_user_or_group_that_is_not_a_name_is_refused_and_no_key_is_made(api, params, param):
    before = api.call("apikey.list")["total"]
    with pytest.raises(RpcError) as caught:
        api.call("apikey.create", name="bad", permissions=["task.*"], **params)
    assert caught.value.reason == "invalid_params" and caught.value.data["param"] == param
    assert api.call("apikey.list")["total"] == before


def test_claim_unclaim_and_completion_by_the_holder(server, api, review):
    me, other = _name("ann"), _name("ben")
    mine, theirs = operator(server, api, me), operator(server, api, other)
    task_id = open_tasks(api, start(api, review, region="x"))[0]["task_id"]
    claimed = mine.call("task.claim", task_id=task_id)
    assert claimed["assignee"] == me and claimed["status"] == "in_progress"
    assert mine.call("task.claim", task_id=task_id)["assignee"] == me  # claiming again changes nothing
    with pytest.raises(RpcError) as caught:
        theirs.call("task.claim", task_id=task_id)
    assert caught.value.reason == "conflict" and me in caught.value.message
    with pytest.raises(RpcError) as caught:
        theirs.call("task.complete", task_id=task_id)
    assert caught.value.reason == "conflict"
    with pytest.raises(RpcError) as caught:
        theirs.call("task.unclaim", task_id=task_id)
    assert caught.value.reason == "conflict"
    assert api.call("task.list", task_id=task_id)["items"][0]["assignee"] == me
    assert mine.call("task.unclaim", task_id=task_id)["assignee"] is None
    theirs.call("task.claim", task_id=task_id)
    theirs.call("task.complete", task_id=task_id)
    with pytest.raises(RpcError) as caught:
        mine.call("task.claim", task_id=task_id)
    assert caught.value.reason == "conflict" and "completed" in caught.value.message


def test_a_key_without_a_user_cannot_claim_and_unknown_tasks_are_not_found(server, api, review):
    nobody = operator(server, api)
    task_id = open_tasks(api, start(api, review, region="x"))[0]["task_id"]
    with pytest.raises(RpcError) as caught:
        nobody.call("task.claim", task_id=task_id)
    assert caught.value.reason == "invalid_params" and caught.value.data["key"] == "no_user"
    assert api.call("task.list", task_id=task_id)["items"][0]["assignee"] is None
    with pytest.raises(RpcError) as caught:
        operator(server, api, "zed").call("task.claim", task_id=10**12)
    assert caught.value.reason == "not_found"


def test_of_two_concurrent_claims_exactly_one_wins(server, api, review):
    task_id = open_tasks(api, start(api, review, region="x"))[0]["task_id"]
    users = [_name(f"op{i}") for i in range(6)]
    keys = [operator(server, api, user).key for user in users]
    ready = threading.Barrier(len(keys))

    def claim(key):
        client = Api(server.base_url, key)
        ready.wait()
        try:
            return client.call("task.claim", task_id=task_id)["assignee"]
        except RpcError as exc:
            return exc.reason

    with concurrent.futures.ThreadPoolExecutor(len(keys)) as pool:
        outcomes = list(pool.map(claim, keys))
    winners = [outcome for outcome in outcomes if outcome in users]
    assert len(winners) == 1 and outcomes.count("conflict") == len(keys) - 1
    assert api.call("task.list", task_id=task_id)["items"][0]["assignee"] == winners[0]


def test_assign_needs_its_permission_and_hands_over_or_releases(server, api, review):
    worker = operator(server, api, _name("wes"))
    lead = operator(server, api, _name("lea"), permissions=["task.*"])
    task_id = open_tasks(api, start(api, review, region="x"))[0]["task_id"]
    no_assign = operator(server, api, _name("nat"), permissions=["task.list", "task.claim"])
    with pytest.raises(RpcError) as caught:
        no_assign.call("task.assign", task_id=task_id, user="someone")
    assert caught.value.reason == "forbidden" and caught.value.data["permission"] == "task.assign"
    worker_user = worker.call("auth.whoami")["user"]
    assert lead.call("task.assign", task_id=task_id, user=worker_user)["assignee"] == worker_user
    assert lead.call("task.unclaim", task_id=task_id)["assignee"] is None  # a lead releases what others hold
    lead.call("task.assign", task_id=task_id, user="frank")
    for bad in (5, "", "a,b"):
        with pytest.raises(RpcError) as caught:
            lead.call("task.assign", task_id=task_id, user=bad)
        assert caught.value.reason == "invalid_params" and caught.value.data["param"] == "user"
    with pytest.raises(RpcError) as caught:
        lead.call("task.assign", task_id=task_id)
    assert caught.value.reason == "invalid_params"
    assert api.call("task.list", task_id=task_id)["items"][0]["assignee"] == "frank"
    # A key that may assign completes what another holds (an admin finishing an absent colleague's work).
    lead.call("task.complete", task_id=task_id)
    with pytest.raises(RpcError) as caught:
        lead.call("task.assign", task_id=task_id, user=None)
    assert caught.value.reason == "conflict"


def test_inbox_filters_mine_candidate_group_assignee_and_unassigned(server, api, review):
    group, user, other = _name("grp"), _name("uma"), _name("ola")
    me = operator(server, api, user, [group])
    ids = {}
    for label, variables in (("group", {"region": group.removeprefix("team-")}),
                             ("assigned_to_me", {"requester": user, "region": "x"}),
                             ("assigned_to_other", {"requester": other, "region": group.removeprefix("team-")})):
        ids[label] = open_tasks(api, start(api, review, **variables))[0]["task_id"]
    # Tasks of the group team-<group>: the first and the third; the third is held by someone, so it
    # is nobody's group work any more.
    team = f"team-{group}"
    me_team = operator(server, api, user + "2", [team])
    assert [t["task_id"] for t in api.call("task.list", candidate_group=team)["items"]] == [ids["group"]]
    assert [t["task_id"] for t in me_team.call("task.list", mine=True)["items"]] == [ids["group"]]
    assert [t["task_id"] for t in me.call("task.list", mine=True)["items"]] == [ids["assigned_to_me"]]
    assert [t["task_id"] for t in me.call("task.list", assignee="me")["items"]] == [ids["assigned_to_me"]]
    assert [t["task_id"] for t in api.call("task.list", assignee=other)["items"]] == [ids["assigned_to_other"]]
    unassigned = [t["task_id"] for t in api.call("task.list", assignee=None, status="in_progress",
                                                 per_page=100)["items"]]
    assert ids["group"] in unassigned and ids["assigned_to_me"] not in unassigned
    # Claiming moves a task from the group's inbox to the claimer's.
    me_team.call("task.claim", task_id=ids["group"])
    assert api.call("task.list", candidate_group=team)["total"] == 0
    claimed = me_team.call("task.list", mine=True)
    assert claimed["total"] == 1 and claimed["items"][0]["assignee"] == user + "2"
    # Completed tasks leave every inbox.
    me_team.call("task.complete", task_id=ids["group"])
    assert me_team.call("task.list", mine=True)["total"] == 0


@pytest.mark.parametrize("params, param", [
    ({"mine": True, "status": "completed"}, "mine"), ({"overdue": "yes"}, "overdue"),
    ({"sort": "name"}, "sort"), ({"assignee": 3}, "assignee"), ({"candidate_group": ["a"]}, "candidate_group"),
    ({"mine": True}, "mine"), ({"assignee": "me"}, "assignee"),
])
def test_bad_inbox_filters_are_refused_naming_the_parameter(api, params, param):
    with pytest.raises(RpcError) as caught:
        api.call("task.list", **params)  # the admin key stands for no user
    assert caught.value.reason == "invalid_params" and caught.value.data["param"] == param


def test_overdue_tasks_are_listed_sorted_and_counted_in_metrics(server, api, review):
    region = _name("r")
    late = open_tasks(api, start(api, review, region=region, due=iso_in(-2), urgency=10))[0]["task_id"]
    soon = open_tasks(api, start(api, review, region=region, due=iso_in(5), urgency=90))[0]["task_id"]
    undated = open_tasks(api, start(api, review, region=region, urgency=40))[0]["task_id"]
    group = f"team-{region}"
    overdue = [t["task_id"] for t in api.call("task.list", overdue=True, per_page=100)["items"]]
    assert late in overdue and soon not in overdue and undated not in overdue
    by_due = [t["task_id"] for t in api.call("task.list", candidate_group=group, sort="due")["items"]]
    assert by_due == [late, soon, undated]
    by_priority = [t["task_id"] for t in api.call("task.list", candidate_group=group, sort="priority")["items"]]
    assert by_priority == [soon, undated, late]
    # The whole tenant sorted by due date: the late one before the soon one, undated ones last.
    everything = [t for t in api.call("task.list", status="in_progress", sort="due", per_page=100)["items"]]
    dues = [t["due_at"] for t in everything]
    assert dues == sorted(dues, key=lambda d: (d is None, d))
    tenant = api.call("auth.whoami")["tenant"]
    metrics = requests.get(server.base_url + "/metrics", timeout=10).text
    lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in metrics.splitlines()
             if line.startswith(("baton_tasks_open{", "baton_tasks_overdue{"))}
    assert lines[f'baton_tasks_overdue{{tenant="{tenant}"}}'] >= 1
    assert lines[f'baton_tasks_open{{tenant="{tenant}"}}'] >= 3


# -- conversations held by an operator -------------------------------------------------------------

@pytest.fixture
def conversation(server, api, unique_code):
    from tests.integration.test_webchat import accepted, create_channel, deploy_chat

    channel = create_channel(api)
    deploy_chat(api, "chat_operator.bpmn", channel["name"], unique_code)
    site = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    return accepted(server, site, channel["config_id"], chat_id=_name("chat"), text="hello")["binding_id"]


CHAT_WORKER = ("conversation.list", "conversation.send", "conversation.claim", "conversation.messages")


def test_a_conversation_is_claimed_by_one_operator_whose_replies_alone_go_out(server, api, conversation):
    one, two = _name("cat"), _name("dan")
    first = operator(server, api, one, permissions=CHAT_WORKER)
    second = operator(server, api, two, permissions=CHAT_WORKER)
    assert first.call("conversation.claim", binding_id=conversation)["assignee"] == one
    with pytest.raises(RpcError) as caught:
        second.call("conversation.claim", binding_id=conversation)
    assert caught.value.reason == "conflict" and one in caught.value.message
    with pytest.raises(RpcError) as caught:
        second.call("conversation.send", binding_id=conversation, text="I can help too")
    assert caught.value.reason == "conflict"
    first.call("conversation.send", binding_id=conversation, text="I am on it")
    texts = [m["text"] for m in api.call("conversation.messages", binding_id=conversation)["items"]]
    assert "I am on it" in texts and "I can help too" not in texts
    mine = first.call("conversation.list", assignee="me")["items"]
    assert [c["binding_id"] for c in mine] == [conversation] and mine[0]["assignee"] == one
    assert conversation not in [c["binding_id"] for c in api.call("conversation.list", assignee=None,
                                                                   per_page=100)["items"]]


def test_conversation_assign_hands_over_with_its_permission(server, api, conversation):
    worker = operator(server, api, _name("eve"), permissions=CHAT_WORKER)
    with pytest.raises(RpcError) as caught:
        worker.call("conversation.assign", binding_id=conversation, user="fay")
    assert caught.value.reason == "forbidden" and caught.value.data["permission"] == "conversation.assign"
    assert api.call("conversation.assign", binding_id=conversation, user="fay")["assignee"] == "fay"
    api.call("conversation.send", binding_id=conversation, text="an admin may still answer")
    assert api.call("conversation.assign", binding_id=conversation, user=None)["assignee"] is None
    for params, reason in (({"binding_id": 10**12, "user": "x"}, "not_found"), ({"binding_id": conversation, "user": 4},
                           "invalid_params"), ({"binding_id": conversation}, "invalid_params")):
        with pytest.raises(RpcError) as caught:
            api.call("conversation.assign", **params)
        assert caught.value.reason == reason
    with pytest.raises(RpcError) as caught:
        operator(server, api, permissions=CHAT_WORKER).call("conversation.claim", binding_id=conversation)
    assert caught.value.reason == "invalid_params" and caught.value.data["key"] == "no_user"
    worker.call("conversation.claim", binding_id=conversation)

    # The instance's history records each hand-over and claim with who did it; refused calls nothing.
    instance_id = next(c["instance_id"] for c in api.call("conversation.list", per_page=100)["items"]
                       if c["binding_id"] == conversation)
    events = [e for e in api.call("process.history", instance_id=instance_id, per_page=100)["items"]
              if e["kind"].startswith("conversation_")]
    assert [(e["kind"], e["detail"]) for e in events] == [
        ("conversation_assigned", {"binding_id": conversation, "assignee": "fay"}),
        ("conversation_assigned", {"binding_id": conversation, "assignee": None}),
        ("conversation_claimed", {"binding_id": conversation, "assignee": worker.call("auth.whoami")["user"]})]
    assert events[-1]["actor"]["name"] == worker.call("auth.whoami")["name"]
