"""Live instances moved to a new version (contract §5.7): ``definition.diff`` and ``process.migrate``,
through a real server on SQLite and PostgreSQL."""
from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import create_engine, text

from tests.harness import BatonServer, RpcError
from tests.integration.test_webchat import accepted, create_channel, eventually

NS = ('xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
      'xmlns:camunda="http://camunda.org/schema/1.0/bpmn" targetNamespace="http://baton.dev/tests"')


def process(process_id: str, body: str, extra: str = "") -> str:
    """A BPMN file of one process; ``body`` its elements and flows."""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<bpmn:definitions {NS} id="d_{process_id}">{extra}'
            f'<bpmn:process id="{process_id}" isExecutable="true">{body}</bpmn:process></bpmn:definitions>')


def chain(*elements: str) -> str:
    """Elements given as ``tag:id`` (or raw XML starting with ``<``), joined by sequence flows in order."""
    parts, ids = [], []
    for element in elements:
        if element.startswith("<"):
            parts.append(element)
            ids.append(element.split('id="', 1)[1].split('"', 1)[0])
        else:
            tag, element_id = element.split(":")
            parts.append(f'<bpmn:{tag} id="{element_id}" />')
            ids.append(element_id)
    flows = [f'<bpmn:sequenceFlow id="f_{a}_{b}" sourceRef="{a}" targetRef="{b}" />' for a, b in zip(ids, ids[1:])]
    return "".join(parts + flows)


V1 = chain("startEvent:start", "userTask:review", "endEvent:end")
V2 = chain("startEvent:start", "userTask:review", "userTask:follow_up", "endEvent:end")
V2_KIND = chain("startEvent:start", "manualTask:review", "endEvent:end")
V2_GONE = chain("startEvent:start", "userTask:approve", "endEvent:end")


def deploy(api, code: str, body: str, extra: str = "") -> dict:
    return api.deploy(process(code.replace("-", "_"), body, extra), code=code)


def open_tasks(api, instance_id: int) -> list[dict]:
    return api.call("task.list", instance_id=instance_id, status="in_progress")["items"]


def waiting_task(api, instance_id: int, element_id: str) -> dict:
    [task] = eventually(lambda: open_tasks(api, instance_id),
                        lambda tasks: [t["element_id"] for t in tasks] == [element_id])
    return task


def db_rows(server, sql: str, **params) -> list:
    engine = create_engine(server.database_url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(text(sql), params))
    finally:
        engine.dispose()


def snapshot(server, api, instance_id: int) -> dict:
    """Everything a refused or dry-run migration must leave as it was."""
    [row] = db_rows(server, "SELECT definition_id, revision, state, waiting_for FROM instances WHERE id = :id",
                    id=instance_id)
    return {"status": api.call("process.status", instance_id=instance_id), "row": tuple(row),
            "tasks": api.call("task.list", instance_id=instance_id)["items"],
            "history": [tuple(r) for r in db_rows(server, "SELECT id, kind FROM history_events WHERE instance_id = :id",
                                                  id=instance_id)],
            "subscriptions": [tuple(r) for r in db_rows(
                server, "SELECT id, name FROM event_subscriptions WHERE instance_id = :id", id=instance_id)]}


@pytest.fixture
def versions(api, unique_code):
    """v1 (review) and v2 (review, then follow_up) of one code."""
    return deploy(api, unique_code, V1), deploy(api, unique_code, V2)


def start_at_review(api, definition_id: int, **variables) -> int:
    instance_id = api.call("process.start", definition_id=definition_id, variables=variables)["instance_id"]
    waiting_task(api, instance_id, "review")
    return instance_id


# -- definition.diff --------------------------------------------------------------------------------

def test_diff_names_the_elements_added_removed_and_changed(api, unique_code):
    v1 = deploy(api, unique_code, V1)
    v2 = deploy(api, unique_code, chain("startEvent:start", "userTask:review", "userTask:follow_up",
                                        "manualTask:approve", "endEvent:end"))
    v3 = deploy(api, unique_code, chain("startEvent:start", "manualTask:review", "endEvent:end"))
    diff = api.call("definition.diff", from_definition_id=v1["definition_id"], to_definition_id=v2["definition_id"])
    assert (diff["added"], diff["removed"]) == (["approve", "follow_up"], [])
    assert diff["changed"] == ["end", "review"]  # review's flow now leads to follow_up, end's comes from approve
    assert (diff["from_version"], diff["to_version"]) == (v1["version"], v2["version"])
    back = api.call("definition.diff", from_definition_id=v2["definition_id"], to_definition_id=v1["definition_id"])
    assert (back["added"], back["removed"]) == ([], ["approve", "follow_up"])
    kind = api.call("definition.diff", from_definition_id=v1["definition_id"], to_definition_id=v3["definition_id"])
    assert (kind["added"], kind["removed"], kind["changed"]) == ([], [], ["review"])
    same = api.call("definition.diff", from_definition_id=v1["definition_id"], to_definition_id=v1["definition_id"])
    assert (same["added"], same["removed"], same["changed"]) == ([], [], [])


def test_diff_of_a_foreign_or_unknown_definition_is_not_found(api, other_api, unique_code):
    v1 = deploy(api, unique_code, V1)
    foreign = deploy(other_api, unique_code, V1)
    for params in ({"from_definition_id": v1["definition_id"], "to_definition_id": foreign["definition_id"]},
                   {"from_definition_id": 10 ** 9, "to_definition_id": v1["definition_id"]}):
        with pytest.raises(RpcError) as refused:
            api.call("definition.diff", **params)
        assert refused.value.reason == "not_found"


def test_diff_needs_admin(server, api, unique_code):
    v1 = deploy(api, unique_code, V1)
    key = api.call("apikey.create", name="ops", permissions=["process.*"])["api_key"]
    with pytest.raises(RpcError) as refused:
        server.api(key).call("definition.diff", from_definition_id=v1["definition_id"],
                             to_definition_id=v1["definition_id"])
    assert refused.value.reason == "forbidden"


# -- process.migrate: one waiting user task ----------------------------------------------------------

def test_a_waiting_instance_moves_to_v2_keeps_its_task_and_variables_and_goes_on_there(server, api, versions):
    v1, v2 = versions
    instance_id = start_at_review(api, v1["definition_id"], amount=70, note="keep me")
    task = waiting_task(api, instance_id, "review")

    answer = api.call("process.migrate", instance_ids=[instance_id], to_definition_id=v2["definition_id"])
    assert answer["results"] == [{"instance_id": instance_id, "status": "migrated"}]
    status = api.call("process.status", instance_id=instance_id)
    assert (status["definition_id"], status["version"]) == (v2["definition_id"], v2["version"])
    assert status["variables"] == {"amount": 70, "note": "keep me"}
    assert [w["element_id"] for w in status["waiting_for"]] == ["review"]
    [same] = open_tasks(api, instance_id)
    assert (same["task_id"], same["definition_id"]) == (task["task_id"], v2["definition_id"])
    history = api.call("process.history", instance_id=instance_id, per_page=100)["items"]
    [event] = [item for item in history if item["kind"] == "migrated"]
    assert (event["detail"]["from_version"], event["detail"]["to_version"]) == (v1["version"], v2["version"])
    assert event["actor"]["type"] == "api_key"

    api.call("task.complete", task_id=task["task_id"], result={"approved": True})
    follow_up = waiting_task(api, instance_id, "follow_up")  # the step only v2 has
    api.call("task.complete", task_id=follow_up["task_id"], result={})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"]["approved"] is True



def test_dry_run_answers_what_would_happen_and_changes_nothing(server, api, unique_code):
    v1 = deploy(api, unique_code, V1)
    v2 = deploy(api, unique_code, V2)
    v3 = deploy(api, unique_code, V2_KIND)
    movable = start_at_review(api, v1["definition_id"])
    before = snapshot(server, api, movable)
    answer = api.call("process.migrate", instance_ids=[movable], to_definition_id=v2["definition_id"], dry_run=True)
    assert answer["results"] == [{"instance_id": movable, "status": "would_migrate"}] and answer["dry_run"] is True
    refused = api.call("process.migrate", instance_ids=[movable], to_definition_id=v3["definition_id"], dry_run=True)
    [result] = refused["results"]
    assert result["status"] == "refused" and "'review'" in result["reason"] and "manualTask" in result["reason"]
    assert snapshot(server, api, movable) == before


def test_refusals_name_the_elements_and_change_nothing(server, api, unique_code):
    v1 = deploy(api, unique_code, V1)
    kind = deploy(api, unique_code, V2_KIND)
    gone = deploy(api, unique_code, V2_GONE)
    instance_id = start_at_review(api, v1["definition_id"])
    before = snapshot(server, api, instance_id)

    [changed] = api.call("process.migrate", instance_ids=[instance_id], to_definition_id=kind["definition_id"])["results"]
    assert changed["status"] == "refused"
    assert changed["reason"] == "element 'review' (the instance is at) is a userTask here and a manualTask in the target version"
    [missing] = api.call("process.migrate", instance_ids=[instance_id], to_definition_id=gone["definition_id"])["results"]
    assert missing["status"] == "refused"
    assert missing["reason"] == "element 'review' (userTask, the instance is at) is not in the target version"
    assert snapshot(server, api, instance_id) == before


def test_bad_input_is_refused_whole_and_changes_nothing(server, api, other_api, unique_code):
    v1 = deploy(api, unique_code, V1)
    v2 = deploy(api, unique_code, V2)
    other_code = deploy(api, unique_code + "-other", V2)
    waiting = start_at_review(api, v1["definition_id"])
    ended = start_at_review(api, v1["definition_id"])
    api.call("process.cancel", instance_id=ended)
    foreign_v1 = deploy(other_api, unique_code, V1)
    foreign = other_api.call("process.start", definition_id=foreign_v1["definition_id"])["instance_id"]
    before = snapshot(server, api, waiting)

    def refused(**params) -> RpcError:
        with pytest.raises(RpcError) as caught:
            api.call("process.migrate", **params)
        return caught.value

    error = refused(instance_ids=[waiting, foreign], to_definition_id=v2["definition_id"])
    assert error.reason == "not_found" and str(foreign) in error.message
    error = refused(instance_ids=[waiting, ended], to_definition_id=v2["definition_id"])
    assert error.reason == "conflict" and f"Instance {ended} is cancelled" in error.message
    error = refused(instance_ids=[waiting], to_definition_id=other_code["definition_id"])
    assert error.reason == "invalid_params" and unique_code + "-other" in error.message
    assert refused(instance_ids=[waiting], to_definition_id=foreign_v1["definition_id"]).reason == "not_found"
    assert refused(instance_ids=[], to_definition_id=v2["definition_id"]).reason == "invalid_params"
    assert refused(instance_ids=list(range(1, 102)), to_definition_id=v2["definition_id"]).reason == "invalid_params"
    assert refused(instance_ids=[waiting, waiting], to_definition_id=v2["definition_id"]).reason == "invalid_params"
    assert refused(instance_ids=["x"], to_definition_id=v2["definition_id"]).reason == "invalid_params"
    assert snapshot(server, api, waiting) == before


def test_an_instance_already_on_the_target_answers_migrated_and_is_left_alone(server, api, versions):
    v1, v2 = versions
    instance_id = start_at_review(api, v2["definition_id"])
    before = snapshot(server, api, instance_id)
    [result] = api.call("process.migrate", instance_ids=[instance_id], to_definition_id=v2["definition_id"])["results"]
    assert result == {"instance_id": instance_id, "status": "migrated", "reason": f"already on version {v2['version']}"}
    assert snapshot(server, api, instance_id) == before


# -- what a migrated instance keeps: subscriptions, call activities, timers ---------------------------

def message_catch(code: str, after: str = "") -> str:
    """Waits at a message catch event correlated by ``order``; ``after``: elements before the end."""
    extra = (f'<bpmn:message id="m_paid" name="paid_{code}" /><bpmn:correlationProperty id="order_id">'
             '<bpmn:correlationPropertyRetrievalExpression messageRef="m_paid"><bpmn:formalExpression>order_id'
             '</bpmn:formalExpression></bpmn:correlationPropertyRetrievalExpression></bpmn:correlationProperty>')
    catch = ('<bpmn:intermediateCatchEvent id="paid"><bpmn:messageEventDefinition messageRef="m_paid" />'
             '</bpmn:intermediateCatchEvent>')
    return chain("startEvent:start", catch, *([after] if after else []), "endEvent:end"), extra


def test_a_migrated_instance_keeps_one_subscription_and_the_message_reaches_it_once(server, api, unique_code):
    body1, extra = message_catch(unique_code)
    body2, _ = message_catch(unique_code, "userTask:follow_up")
    v1, v2 = deploy(api, unique_code, body1, extra), deploy(api, unique_code, body2, extra)
    instance_id, other = (api.call("process.start", definition_id=v1["definition_id"],
                                   variables={"order_id": order})["instance_id"] for order in ("A-1", "B-2"))
    [waiting] = eventually(lambda: api.call("process.status", instance_id=instance_id)["waiting_for"], bool)
    assert waiting["correlation"] == {"order_id": "A-1"}
    before = snapshot(server, api, instance_id)["subscriptions"]
    assert [name for _id, name in before] == [f"paid_{unique_code}"]

    results = api.call("process.migrate", instance_ids=[instance_id, other],
                       to_definition_id=v2["definition_id"])["results"]
    assert [r["status"] for r in results] == ["migrated", "migrated"]
    assert api.call("process.status", instance_id=instance_id)["waiting_for"] == [waiting]  # correlation kept
    assert snapshot(server, api, instance_id)["subscriptions"] == before  # the same row, not a second one
    answer = api.call("message.correlate", name=f"paid_{unique_code}", correlation={"order_id": "A-1"},
                      variables={"paid": True})
    assert answer["reached"] == [instance_id]  # once: one subscription, one delivery, the right instance
    follow_up = waiting_task(api, instance_id, "follow_up")
    assert follow_up["definition_id"] == v2["definition_id"]
    assert snapshot(server, api, instance_id)["subscriptions"] == []
    with pytest.raises(RpcError) as nobody:  # nothing waits for it any more
        api.call("message.correlate", name=f"paid_{unique_code}", correlation={"order_id": "A-1"})
    assert nobody.value.reason == "conflict"
    assert api.call("message.correlate", name=f"paid_{unique_code}",
                    correlation={"order_id": "B-2"})["reached"] == [other]


def test_an_instance_inside_a_started_call_activity_migrates_and_returns_to_the_new_version(api, unique_code):
    callee = "callee_" + uuid.uuid4().hex[:8]
    deploy(api, callee, chain("startEvent:start", "userTask:inner", "endEvent:end"))
    call = f'<bpmn:callActivity id="call" calledElement="{callee}" />'
    v1 = deploy(api, unique_code, chain("startEvent:start", call, "endEvent:end"))
    v2 = deploy(api, unique_code, chain("startEvent:start", call, "userTask:after_call", "endEvent:end"))
    instance_id = api.call("process.start", definition_id=v1["definition_id"], variables={"n": 1})["instance_id"]
    inner = waiting_task(api, instance_id, "inner")

    [result] = api.call("process.migrate", instance_ids=[instance_id], to_definition_id=v2["definition_id"],
                        dry_run=True)["results"]
    assert result == {"instance_id": instance_id, "status": "would_migrate"}
    [result] = api.call("process.migrate", instance_ids=[instance_id],
                        to_definition_id=v2["definition_id"])["results"]
    assert result == {"instance_id": instance_id, "status": "migrated"}
    [same] = open_tasks(api, instance_id)
    assert same["task_id"] == inner["task_id"]
    api.call("task.complete", task_id=inner["task_id"], result={"inner_done": True})
    after = waiting_task(api, instance_id, "after_call")  # back in the caller, on v2
    api.call("task.complete", task_id=after["task_id"], result={})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"]["inner_done"] is True
    assert done["version"] == v2["version"]


def test_a_call_activity_the_instance_runs_below_must_stay(api, unique_code):
    callee = "callee_" + uuid.uuid4().hex[:8]
    deploy(api, callee, chain("startEvent:start", "userTask:inner", "endEvent:end"))
    call = f'<bpmn:callActivity id="call" calledElement="{callee}" />'
    v1 = deploy(api, unique_code, chain("startEvent:start", call, "endEvent:end"))
    v2 = deploy(api, unique_code, chain("startEvent:start", "userTask:instead", "endEvent:end"))
    instance_id = api.call("process.start", definition_id=v1["definition_id"])["instance_id"]
    waiting_task(api, instance_id, "inner")
    [result] = api.call("process.migrate", instance_ids=[instance_id],
                        to_definition_id=v2["definition_id"])["results"]
    assert result["status"] == "refused"
    assert result["reason"] == ("element 'call' (callActivity, running below the instance) is not in the "
                                "target version")
    other = "other_" + uuid.uuid4().hex[:8]
    deploy(api, other, chain("startEvent:start", "userTask:inner", "endEvent:end"))
    v3 = deploy(api, unique_code, chain("startEvent:start", f'<bpmn:callActivity id="call" calledElement="{other}" />',
                                        "endEvent:end"))
    [result] = api.call("process.migrate", instance_ids=[instance_id],
                        to_definition_id=v3["definition_id"])["results"]
    assert result["reason"] == (f"element 'call' (callActivity) runs process '{callee}', which the target version "
                                "does not run there")


def test_a_waiting_timer_keeps_its_due_time(api, unique_code):
    timer = ('<bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition>'
             '<bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>')
    v1 = deploy(api, unique_code, chain("startEvent:start", timer, "endEvent:end"))
    v2 = deploy(api, unique_code, chain("startEvent:start", timer, "userTask:follow_up", "endEvent:end"))
    instance_id = api.call("process.start", definition_id=v1["definition_id"])["instance_id"]
    [waiting] = eventually(lambda: api.call("process.status", instance_id=instance_id)["waiting_for"], bool)
    assert api.call("process.migrate", instance_ids=[instance_id],
                    to_definition_id=v2["definition_id"])["results"][0]["status"] == "migrated"
    assert api.call("process.status", instance_id=instance_id)["waiting_for"] == [waiting]


# -- web-chat: 100 conversations move, and the next message is answered by the new version ------------

KNOWLEDGE = "Q: How long does delivery take?&#10;A: Delivery takes 3 to 5 working days within the EU."


def chat_process(code: str, channel_id: int, new_step: bool) -> str:
    assistant = ('<bpmn:serviceTask id="assistant"><bpmn:extensionElements><camunda:properties>'
                 '<camunda:property name="operator" value="ai_chat" />'
                 f'<camunda:property name="knowledge" value="{KNOWLEDGE}" />'
                 '<camunda:property name="max_turns" value="2" />'
                 '</camunda:properties></bpmn:extensionElements></bpmn:serviceTask>')

    def send(element_id: str, text_: str) -> str:
        return (f'<bpmn:serviceTask id="{element_id}"><bpmn:extensionElements><camunda:properties>'
                '<camunda:property name="operator" value="send_message" />'
                f'<camunda:property name="text" value="{text_}" />'
                '</camunda:properties></bpmn:extensionElements></bpmn:serviceTask>')

    start = ('<bpmn:startEvent id="chat_start"><bpmn:extensionElements><camunda:properties>'
             '<camunda:property name="trigger" value="webchat" />'
             f'<camunda:property name="channel" value="{channel_id}" />'
             '</camunda:properties></bpmn:extensionElements></bpmn:startEvent>')
    steps = [start, assistant, *([send("survey", "v2: how did we do?")] if new_step else []),
             send("goodbye", "Goodbye!"), "endEvent:end"]
    return process(code.replace("-", "_"), chain(*steps))


CHATS = 100


def test_100_waiting_conversations_move_and_their_next_message_is_answered_by_the_new_version(
        server, api, receiver, unique_code):
    channel = create_channel(api, webhook_url=receiver.url + "/chat")
    key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    v1 = api.deploy(chat_process(unique_code, channel["config_id"], new_step=False), code=unique_code)
    chats = [f"chat-{i}-{uuid.uuid4().hex[:6]}" for i in range(CHATS)]
    question = "How long does delivery take?"
    instances = {chat: accepted(server, key, channel["config_id"], chat_id=chat, text=question)["instance_id"]
                 for chat in chats}

    def texts() -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for request in list(receiver.requests):
            body = request.json()
            found.setdefault(body.get("chat_id"), []).append(body.get("text"))
        return found

    eventually(texts, lambda found: all(len(found.get(chat, [])) == 1 for chat in chats), timeout=120)
    assert texts()[chats[0]] == ["Delivery takes 3 to 5 working days within the EU."]
    v2 = api.deploy(chat_process(unique_code, channel["config_id"], new_step=True), code=unique_code)
    assert v2["version"] == v1["version"] + 1

    ids = [instances[chat] for chat in chats]
    preview = api.call("process.migrate", instance_ids=ids, to_definition_id=v2["definition_id"], dry_run=True)
    assert {r["status"] for r in preview["results"]} == {"would_migrate"}
    answer = api.call("process.migrate", instance_ids=ids, to_definition_id=v2["definition_id"])
    assert [r["instance_id"] for r in answer["results"]] == ids
    assert {r["status"] for r in answer["results"]} == {"migrated"}
    assert {api.call("process.status", instance_id=i)["version"] for i in ids[::10]} == {v2["version"]}

    for chat in chats:
        accepted(server, key, channel["config_id"], chat_id=chat, text=question)
    expected = ["Delivery takes 3 to 5 working days within the EU."] * 2 + ["v2: how did we do?", "Goodbye!"]
    eventually(texts, lambda found: all(found.get(chat) == expected for chat in chats), timeout=180)
    for instance_id in ids[::10]:
        assert api.wait_for(instance_id)["status"] == "completed"


# -- kill -9 in the middle of a bulk migration ---------------------------------------------------------

BULK = 100
PADDING = "x" * 20_000  # a bigger state: each instance's move takes long enough for the kill to land mid-way


def placement(database_url: str, ids: list[int], v1_id: int, v2_id: int) -> dict[int, str]:
    """Each instance read straight from the database: "v1" (wholly), "v2" (wholly) or "half"."""
    engine = create_engine(database_url)
    found = {}
    try:
        with engine.connect() as connection:
            for instance_id in ids:
                definition_id = connection.execute(text("SELECT definition_id FROM instances WHERE id = :id"),
                                                   {"id": instance_id}).scalar_one()
                task_definitions = set(connection.execute(text(
                    "SELECT definition_id FROM tasks WHERE instance_id = :id"), {"id": instance_id}).scalars())
                events = connection.execute(text("SELECT count(*) FROM history_events WHERE instance_id = :id "
                                                 "AND kind = 'migrated'"), {"id": instance_id}).scalar_one()
                if (definition_id, task_definitions, events) == (v1_id, {v1_id}, 0):
                    found[instance_id] = "v1"
                elif (definition_id, task_definitions, events) == (v2_id, {v2_id}, 1):
                    found[instance_id] = "v2"
                else:
                    found[instance_id] = "half"
    finally:
        engine.dispose()
    return found


def migrated_count(engine, v2_id: int) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM instances WHERE definition_id = :id"),
                                  {"id": v2_id}).scalar_one()


def test_kill_9_in_the_middle_of_a_bulk_migration_leaves_each_instance_whole_and_a_second_call_finishes(
        own_database, tmp_path, unique_code):
    server = BatonServer(own_database, tmp_path).start()
    try:
        api = server.api(server.create_tenant(f"mig-{uuid.uuid4().hex[:8]}"))
        v1, v2 = deploy(api, unique_code, V1), deploy(api, unique_code, V2)
        ids = [api.call("process.start", definition_id=v1["definition_id"],
                        variables={"n": n, "padding": PADDING})["instance_id"] for n in range(BULK)]
        for instance_id in ids:
            waiting_task(api, instance_id, "review")

        outcome: dict = {}

        def migrate() -> None:
            try:
                outcome["answer"] = api.call("process.migrate", instance_ids=ids, to_definition_id=v2["definition_id"])
            except Exception as exc:  # noqa: BLE001 - the kill cuts the answer off: that is the point
                outcome["error"] = exc

        caller = threading.Thread(target=migrate)
        caller.start()
        watcher = create_engine(own_database)  # one engine: a poll is a query, not a new connection pool
        try:
            eventually(lambda: migrated_count(watcher, v2["definition_id"]), lambda count: count >= 3, timeout=60)
            server.kill()
        finally:
            watcher.dispose()
        caller.join(30)
        assert "answer" not in outcome  # the call was cut off ...
        first = placement(own_database, ids, v1["definition_id"], v2["definition_id"])
        assert "half" not in first.values(), first
        assert 0 < list(first.values()).count("v2") < BULK  # ... in the middle

        server.start()
        answer = api.call("process.migrate", instance_ids=ids, to_definition_id=v2["definition_id"])
        assert {r["status"] for r in answer["results"]} == {"migrated"}
        already = [r["instance_id"] for r in answer["results"] if r.get("reason", "").startswith("already")]
        assert already == [i for i in ids if first[i] == "v2"]
        assert set(placement(own_database, ids, v1["definition_id"], v2["definition_id"]).values()) == {"v2"}
        for instance_id in ids[:: BULK // 5]:
            [task] = open_tasks(api, instance_id)
            api.call("task.complete", task_id=task["task_id"], result={})
            waiting_task(api, instance_id, "follow_up")
    finally:
        server.stop()


# -- external tasks, boundary events and embedded subprocesses ---------------------------------------

def test_an_open_external_task_follows_the_instance_and_its_worker_completes_it_on_v2(server, api, unique_code):
    topic = f"charge-{unique_code}"
    charge = f'<bpmn:serviceTask id="charge" camunda:type="external" camunda:topic="{topic}" />'
    v1 = deploy(api, unique_code, chain("startEvent:start", charge, "endEvent:end"))
    v2 = deploy(api, unique_code, chain("startEvent:start", charge, "userTask:follow_up", "endEvent:end"))
    instance_id = api.call("process.start", definition_id=v1["definition_id"])["instance_id"]
    [before] = eventually(lambda: api.call("external.list", instance_id=instance_id)["items"], bool)
    assert api.call("process.migrate", instance_ids=[instance_id],
                    to_definition_id=v2["definition_id"])["results"][0]["status"] == "migrated"
    [row] = db_rows(server, "SELECT id, definition_id, status FROM external_tasks WHERE instance_id = :id",
                    id=instance_id)
    assert (row.id, row.definition_id, row.status) == (before["task_id"], v2["definition_id"], "open")
    [fetched] = api.call("external.fetch_and_lock", worker_id="w1",
                         topics=[{"name": topic, "lock_duration_ms": 10000}])["tasks"]
    assert fetched["task_id"] == before["task_id"]
    api.call("external.complete", task_id=fetched["task_id"], worker_id="w1", variables={"charged": True})
    assert waiting_task(api, instance_id, "follow_up")["definition_id"] == v2["definition_id"]


def boundary_in_subprocess(code: str, after: str = "") -> tuple[str, str]:
    """A subprocess whose user task has a message boundary event (interrupting) to ``escalated``."""
    extra = f'<bpmn:message id="m_cancel" name="cancel_{code}" />'
    inner = chain("startEvent:sub_start", "userTask:inner", "endEvent:sub_end")
    sub = f'<bpmn:subProcess id="sub">{inner}</bpmn:subProcess>'
    boundary = ('<bpmn:boundaryEvent id="cancelled" attachedToRef="sub"><bpmn:messageEventDefinition '
                'messageRef="m_cancel" /></bpmn:boundaryEvent>'
                '<bpmn:endEvent id="escalated" /><bpmn:sequenceFlow id="f_c" sourceRef="cancelled" targetRef="escalated" />')
    return chain("startEvent:start", sub, *([after] if after else []), "endEvent:end") + boundary, extra


def test_a_task_inside_a_subprocess_with_a_boundary_event_migrates(server, api, unique_code):
    body1, extra = boundary_in_subprocess(unique_code)
    body2, _ = boundary_in_subprocess(unique_code, "userTask:follow_up")
    v1, v2 = deploy(api, unique_code, body1, extra), deploy(api, unique_code, body2, extra)
    first = api.call("process.start", definition_id=v1["definition_id"])["instance_id"]
    second = api.call("process.start", definition_id=v1["definition_id"])["instance_id"]
    inner = waiting_task(api, first, "inner")
    waiting_task(api, second, "inner")
    subscriptions = snapshot(server, api, first)["subscriptions"]
    assert [name for _id, name in subscriptions] == [f"cancel_{unique_code}"]

    results = api.call("process.migrate", instance_ids=[first, second], to_definition_id=v2["definition_id"])["results"]
    assert [r["status"] for r in results] == ["migrated", "migrated"]
    assert snapshot(server, api, first)["subscriptions"] == subscriptions
    api.call("task.complete", task_id=inner["task_id"], result={})
    waiting_task(api, first, "follow_up")  # out of the subprocess, on v2's new path
    api.call("message.correlate", name=f"cancel_{unique_code}")  # the boundary still catches, on v2
    assert api.wait_for(second)["status"] == "completed"
    assert api.call("task.list", instance_id=second)["items"][0]["status"] == "cancelled"


# -- a migration never races an advance ----------------------------------------------------------------

RACERS = 30


def test_migrating_while_the_same_instances_advance_loses_nothing_and_doubles_nothing(server, api, versions):
    """Tasks are completed while their instances migrate: each completion is applied exactly once,
    on the version the instance was on when its advance saved (a worker whose save finds the
    instance migrated runs its job again, on the new version)."""
    v1, v2 = versions
    ids = [start_at_review(api, v1["definition_id"], n=n) for n in range(RACERS)]
    tasks = {instance_id: open_tasks(api, instance_id)[0] for instance_id in ids}

    def complete_all() -> None:
        for instance_id in ids:
            api.call("task.complete", task_id=tasks[instance_id]["task_id"], result={"done": instance_id})

    completer = threading.Thread(target=complete_all)
    completer.start()
    left = list(ids)
    while left:  # what ended meanwhile is refused by name (conflict): leave it out and go on
        try:
            api.call("process.migrate", instance_ids=left[:10], to_definition_id=v2["definition_id"])
            left = left[10:]
        except RpcError as exc:
            assert exc.reason == "conflict", exc
            left = [i for i in left if i not in exc.data["instance_ids"]]
    completer.join(60)

    api.wait_until_idle()
    for instance_id in ids:
        status = api.call("process.status", instance_id=instance_id)
        history = [e["kind"] for e in api.call("process.history", instance_id=instance_id, per_page=100)["items"]]
        assert status["variables"].get("done") == instance_id, (status, history)
        assert history.count("task_completed") == 1, history
        if "migrated" in history:  # the completion was applied on v2: its new step waits
            assert status["status"] == "running" and status["version"] == v2["version"]
            [follow_up] = open_tasks(api, instance_id)
            assert follow_up["element_id"] == "follow_up"
        else:  # applied on v1 before the migration reached it: the instance ended there
            assert status["status"] == "completed" and status["version"] == v1["version"]


def script(element_id: str, code: str) -> str:
    return f'<bpmn:scriptTask id="{element_id}" scriptFormat="python"><bpmn:script>{code}</bpmn:script></bpmn:scriptTask>'


def test_a_failed_instance_moves_to_the_fixed_version_and_its_retry_runs_the_fix(api, unique_code):
    v1 = deploy(api, unique_code, chain("startEvent:start", script("divide", "result = 10 / divisor"), "endEvent:end"))
    v2 = deploy(api, unique_code, chain("startEvent:start", script("divide", "result = 10 / (divisor or 5)"),
                                        "endEvent:end"))
    instance_id = api.call("process.start", definition_id=v1["definition_id"], variables={"divisor": 0})["instance_id"]
    failed = api.wait_for(instance_id)
    assert failed["status"] == "failed" and failed["error"]["element_id"] == "divide"
    [result] = api.call("process.migrate", instance_ids=[instance_id], to_definition_id=v2["definition_id"])["results"]
    assert result == {"instance_id": instance_id, "status": "migrated"}
    still = api.call("process.status", instance_id=instance_id)
    assert (still["status"], still["version"]) == ("failed", v2["version"])  # moved, not run
    api.call("process.retry", instance_id=instance_id)
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"]["result"] == 2


def parallel(after: str = "") -> str:
    flows = "".join(f'<bpmn:sequenceFlow id="{i}" sourceRef="{s}" targetRef="{t}" />' for i, s, t in (
        ("p1", "start", "split"), ("p2", "split", "left"), ("p3", "split", "right"), ("p4", "left", "join"),
        ("p5", "right", "join"), ("p6", "join", after or "end"), *([("p7", after, "end")] if after else [])))
    elements = ('<bpmn:startEvent id="start" /><bpmn:parallelGateway id="split" /><bpmn:userTask id="left" />'
                '<bpmn:userTask id="right" /><bpmn:parallelGateway id="join" /><bpmn:endEvent id="end" />'
                + (f'<bpmn:userTask id="{after}" />' if after else ""))
    return elements + flows


def test_an_instance_with_one_branch_at_the_join_and_one_waiting_migrates(api, unique_code):
    v1, v2 = deploy(api, unique_code, parallel()), deploy(api, unique_code, parallel("after_join"))
    instance_id = api.call("process.start", definition_id=v1["definition_id"])["instance_id"]
    both = eventually(lambda: open_tasks(api, instance_id), lambda tasks: len(tasks) == 2)
    left = next(t for t in both if t["element_id"] == "left")
    api.call("task.complete", task_id=left["task_id"], result={"left": True})
    right = waiting_task(api, instance_id, "right")
    assert api.call("process.migrate", instance_ids=[instance_id],
                    to_definition_id=v2["definition_id"])["results"][0]["status"] == "migrated"
    api.call("task.complete", task_id=right["task_id"], result={"right": True})
    after = waiting_task(api, instance_id, "after_join")  # the join fired once, into v2's new step
    api.call("task.complete", task_id=after["task_id"], result={})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"]["left"] and done["variables"]["right"]


def test_process_migrate_is_its_own_permission_and_process_star_grants_it(server, api, versions):
    v1, v2 = versions
    instance_id = start_at_review(api, v1["definition_id"])
    granted = server.api(api.call("apikey.create", name="ops", permissions=["process.*"])["api_key"])
    reader = server.api(api.call("apikey.create", name="reader", permissions=["process.status"])["api_key"])
    params = {"instance_ids": [instance_id], "to_definition_id": v2["definition_id"], "dry_run": True}
    assert granted.call("process.migrate", **params)["results"][0]["status"] == "would_migrate"
    with pytest.raises(RpcError) as refused:
        reader.call("process.migrate", **params)
    assert refused.value.reason == "forbidden"


MULTI = ('<bpmn:userTask id="approve"><bpmn:multiInstanceLoopCharacteristics>'
         '<bpmn:loopDataInputRef>people</bpmn:loopDataInputRef><bpmn:inputDataItem id="person" />'
         '</bpmn:multiInstanceLoopCharacteristics></bpmn:userTask>')


def test_a_half_done_multi_instance_task_migrates_and_its_last_instance_leads_to_the_new_step(api, unique_code):
    v1 = deploy(api, unique_code, chain("startEvent:start", MULTI, "endEvent:end"))
    v2 = deploy(api, unique_code, chain("startEvent:start", MULTI, "userTask:after", "endEvent:end"))
    instance_id = api.call("process.start", definition_id=v1["definition_id"],
                           variables={"people": ["ann", "bob"]})["instance_id"]
    first, second = eventually(lambda: open_tasks(api, instance_id), lambda tasks: len(tasks) == 2)
    api.call("task.complete", task_id=first["task_id"], result={})
    eventually(lambda: open_tasks(api, instance_id), lambda tasks: [t["task_id"] for t in tasks] == [second["task_id"]])
    assert api.call("process.migrate", instance_ids=[instance_id],
                    to_definition_id=v2["definition_id"])["results"][0]["status"] == "migrated"
    api.call("task.complete", task_id=second["task_id"], result={})
    after = waiting_task(api, instance_id, "after")
    api.call("task.complete", task_id=after["task_id"], result={})
    assert api.wait_for(instance_id)["status"] == "completed"


def event_gateway(code: str, after_answer: str = "") -> tuple[str, str]:
    extra = f'<bpmn:message id="m_answer" name="answered_{code}" />'
    answered = ('<bpmn:intermediateCatchEvent id="answered"><bpmn:messageEventDefinition messageRef="m_answer" />'
                '</bpmn:intermediateCatchEvent>')
    late = ('<bpmn:intermediateCatchEvent id="late"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1H'
            '</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>')
    body = (chain("startEvent:start", "eventBasedGateway:first", answered, *([after_answer] if after_answer else []),
                  "endEvent:end_answered")
            + late + '<bpmn:endEvent id="end_late" />'
            + '<bpmn:sequenceFlow id="g1" sourceRef="first" targetRef="late" />'
            + '<bpmn:sequenceFlow id="g2" sourceRef="late" targetRef="end_late" />')
    return body, extra


def test_an_instance_at_an_event_based_gateway_migrates_with_its_one_subscription(server, api, unique_code):
    body1, extra = event_gateway(unique_code)
    body2, _ = event_gateway(unique_code, "userTask:follow_up")
    v1, v2 = deploy(api, unique_code, body1, extra), deploy(api, unique_code, body2, extra)
    instance_id = api.call("process.start", definition_id=v1["definition_id"])["instance_id"]
    [waiting] = eventually(lambda: api.call("process.status", instance_id=instance_id)["waiting_for"], bool)
    before = snapshot(server, api, instance_id)["subscriptions"]
    assert len(before) == 1
    assert api.call("process.migrate", instance_ids=[instance_id],
                    to_definition_id=v2["definition_id"])["results"][0]["status"] == "migrated"
    assert api.call("process.status", instance_id=instance_id)["waiting_for"] == [waiting]  # due time kept
    assert snapshot(server, api, instance_id)["subscriptions"] == before
    assert api.call("message.correlate", name=f"answered_{unique_code}")["reached"] == [instance_id]
    waiting_task(api, instance_id, "follow_up")
