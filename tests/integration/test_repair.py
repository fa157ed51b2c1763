"""process.set_variables, process.skip and process.rewind over real HTTP, on SQLite and PostgreSQL:
what each changes, what it cancels, its history event and actor, and that a refused call changes
nothing (the instance's status, tasks and history compared before and after)."""
from __future__ import annotations

import time
import uuid

import pytest

from tests.harness import RpcError, bpmn
from tests.integration.test_webchat import accepted, create_channel, deploy_chat, eventually


def start(api, code: str, **variables) -> int:
    return api.call("process.start", definition_id=code, variables=variables)["instance_id"]


def tasks(api, instance_id: int) -> list[dict]:
    return api.call("task.list", instance_id=instance_id, per_page=100)["items"]


def open_task(api, instance_id: int, element_id: str, count: int = 1) -> list[dict]:
    return eventually(lambda: [t for t in tasks(api, instance_id)
                               if t["element_id"] == element_id and t["status"] == "in_progress"],
                      lambda found: len(found) >= count)


def snapshot(api, instance_id: int) -> tuple:
    """What a refused repair must leave as it was."""
    api.wait_until_idle()
    status = api.call("process.status", instance_id=instance_id)
    rows = sorted((t["task_id"], t["status"]) for t in tasks(api, instance_id))
    events = api.call("process.history", instance_id=instance_id, per_page=100)["items"]
    return status, rows, events


def refused(api, method: str, reason: str, **params) -> RpcError:
    real = isinstance(params.get("instance_id"), int) and params["instance_id"] < 10**9
    before = snapshot(api, params["instance_id"]) if real else None
    with pytest.raises(RpcError) as caught:
        api.call(method, **params)
    assert caught.value.reason == reason, caught.value
    if before is not None:
        assert snapshot(api, params["instance_id"]) == before
    return caught.value


def last_event(api, instance_id: int) -> dict:
    return api.call("process.history", instance_id=instance_id, per_page=100)["items"][-1]


@pytest.fixture
def ops(server, api):
    name = f"ops-{uuid.uuid4().hex[:6]}"
    return server.api(api.call("apikey.create", name=name, permissions=["process.*", "task.*"])["api_key"]), name


# -- set_variables -------------------------------------------------------------------------------------

def test_set_variables_changes_a_waiting_instance_between_two_steps_and_is_recorded(api, ops, unique_code):
    operator, name = ops
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    instance_id = start(api, unique_code, keep=1, draft="x", note="old")
    [task] = open_task(api, instance_id, "review")
    answer = operator.call("process.set_variables", instance_id=instance_id,
                           variables={"note": "new", "customer": {"tier": "gold"}}, remove=["draft"])
    assert answer == {"instance_id": instance_id,
                      "variables": {"keep": 1, "note": "new", "customer": {"tier": "gold"}}}
    assert api.call("process.status", instance_id=instance_id)["variables"] == answer["variables"]
    # The open task shows the repaired values (a form filled from the old ones would undo the repair).
    [shown] = [t for t in tasks(api, instance_id) if t["task_id"] == task["task_id"]]
    assert shown["variables"] == answer["variables"]
    event = last_event(api, instance_id)
    assert (event["kind"], event["detail"], event["actor"]) == (
        "variables_set", {"set": ["customer", "note"], "removed": ["draft"]}, {"type": "api_key", "name": name})
    api.call("task.complete", task_id=task["task_id"], result={})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"] == answer["variables"]


def test_set_variables_reaches_the_next_fetch_of_a_waiting_external_task(api, unique_code):
    from tests.integration.test_bpmn_runtime import waiting
    from tests.integration.test_external_tasks import ORDER, fetch_one

    api.deploy(ORDER.replace("TOPIC", unique_code), code=unique_code)
    instance_id = start(api, unique_code, order_id=7, address="old street")
    waiting(api, instance_id, "invoice")
    api.call("process.set_variables", instance_id=instance_id, variables={"address": "new street"})
    task = fetch_one(api, unique_code)
    assert task["variables"] == {"order_id": 7, "address": "new street"}
    assert api.call("external.list", instance_id=instance_id)["items"][0]["variables"] == task["variables"]


def test_set_variables_on_a_failed_instance_keeps_it_failed_until_its_retry(api, unique_code):
    api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    instance_id = start(api, unique_code, divisor=0)
    assert api.wait_for(instance_id)["status"] == "failed"
    api.call("process.set_variables", instance_id=instance_id, variables={"divisor": 4})
    assert api.call("process.status", instance_id=instance_id)["status"] == "failed"
    api.call("process.retry", instance_id=instance_id)
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"] == {"divisor": 4, "ratio": 2.5}


def test_refused_variable_changes_change_nothing(server, api, other_api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    instance_id = start(api, unique_code, a=1)
    open_task(api, instance_id, "review")
    assert "nothing to change" in refused(api, "process.set_variables", "invalid_params", instance_id=instance_id).message
    assert "'a'" in refused(api, "process.set_variables", "invalid_params", instance_id=instance_id,
                            variables={"a": 2}, remove=["a"]).message
    refused(api, "process.set_variables", "invalid_params", instance_id=instance_id, variables={"": 1})
    refused(api, "process.set_variables", "invalid_params", instance_id=instance_id, remove=[3])
    refused(api, "process.set_variables", "not_found", instance_id=10**9, variables={"a": 2})
    before = snapshot(api, instance_id)
    with pytest.raises(RpcError) as caught:
        other_api.call("process.set_variables", instance_id=instance_id, variables={"a": 2})
    assert caught.value.reason == "not_found" and snapshot(api, instance_id) == before
    # A number past the limits of every door, named by its path.
    body = ('{"jsonrpc":"2.0","id":1,"method":"process.set_variables","params":{"instance_id":%d,'
            '"variables":{"a":{"b":[1, 1e400]}}}}' % instance_id)
    error = api.post(data=body).json()["error"]
    assert error["data"]["reason"] == "invalid_params" and "variables.a.b[1]" in error["message"]
    deep = '{"x":' * 70 + "1" + "}" * 70
    error = api.post(data='{"jsonrpc":"2.0","id":1,"method":"process.set_variables","params":{"instance_id":%d,'
                          '"variables":%s}}' % (instance_id, deep)).json()["error"]
    assert error["data"]["reason"] == "invalid_params" and "variables" in error["message"]
    assert snapshot(api, instance_id) == before
    api.call("process.cancel", instance_id=instance_id)
    assert "cancelled" in refused(api, "process.set_variables", "conflict", instance_id=instance_id,
                                  variables={"a": 2}).message


def test_variables_are_not_set_while_work_of_the_instance_waits_only_between_two_advances(own_database, tmp_path):
    """With no worker running, the instance's first advance stays queued: the change is refused
    (nothing changes); once a worker has run it and the instance waits, it is applied."""
    from tests.harness import BatonServer, BatonWorker

    server = BatonServer(own_database, tmp_path, BATON_WORKERS="0")
    worker = BatonWorker(own_database, tmp_path)
    try:
        server.start()
        api = server.api(server.create_tenant("between"))
        api.deploy(bpmn("wait_for_person.bpmn"), code="between")
        instance_id = start(api, "between", note="old")
        with pytest.raises(RpcError) as caught:
            api.call("process.set_variables", instance_id=instance_id, variables={"note": "new"})
        assert caught.value.reason == "conflict" and caught.value.data["cause"] == "advancing"
        assert api.call("process.status", instance_id=instance_id)["variables"] == {"note": "old"}
        assert [e["kind"] for e in api.call("process.history", instance_id=instance_id)["items"]] == ["started"]
        worker.start()
        [task] = open_task(api, instance_id, "review")
        api.wait_until_idle()
        api.call("process.set_variables", instance_id=instance_id, variables={"note": "new"})
        api.call("task.complete", task_id=task["task_id"], result={})
        assert api.wait_for(instance_id)["variables"] == {"note": "new"}
    finally:
        worker.stop()
        server.stop()


# -- skip ----------------------------------------------------------------------------------------------

def test_skip_of_a_user_task_cancels_its_task_and_the_instance_goes_on(api, ops, unique_code):
    operator, name = ops
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    instance_id = start(api, unique_code)
    [task] = open_task(api, instance_id, "review")
    preview = operator.call("process.skip", instance_id=instance_id, element_id="review", dry_run=True)
    assert preview["dry_run"] is True and preview["cancelled"] == [{"element_id": "review", "kind": "userTask"}]
    assert [t["status"] for t in tasks(api, instance_id)] == ["in_progress"]
    answer = operator.call("process.skip", instance_id=instance_id, element_id="review", variables={"skipped": True})
    assert answer == {"instance_id": instance_id, "status": "running", "element_id": "review", "dry_run": False,
                      "cancelled": [{"element_id": "review", "kind": "userTask"}]}
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"] == {"skipped": True}
    assert [(t["task_id"], t["status"]) for t in tasks(api, instance_id)] == [(task["task_id"], "cancelled")]
    events = api.call("process.history", instance_id=instance_id)["items"]
    assert [e["kind"] for e in events] == ["started", "skipped", "completed"]
    assert events[1]["element_id"] == "review" and events[1]["actor"] == {"type": "api_key", "name": name}
    assert events[1]["detail"] == {"cancelled": [{"element_id": "review", "kind": "userTask"}], "set": ["skipped"]}


def test_skip_of_the_failed_script_completes_it_without_running_it(api, unique_code):
    api.deploy(bpmn("failing_script.bpmn"), code=unique_code)
    instance_id = start(api, unique_code, divisor=0)
    failed = api.wait_for(instance_id)
    api.call("process.skip", instance_id=instance_id, element_id="divide", variables={"ratio": None})
    done = api.wait_for(instance_id)
    assert (done["status"], done["error"], done["variables"]) == ("completed", None, {"divisor": 0, "ratio": None})
    events = api.call("process.history", instance_id=instance_id)["items"]
    assert [e["kind"] for e in events] == ["started", "failed", "skipped", "completed"]
    assert events[1]["detail"]["message"] == failed["error"]["message"]  # the incident stays
    assert events[2]["detail"]["failed"] == failed["error"]


def test_refused_skips_name_the_element_and_change_nothing(api, other_api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    instance_id = start(api, unique_code)
    open_task(api, instance_id, "review")
    error = refused(api, "process.skip", "invalid_params", instance_id=instance_id, element_id="no_such_step")
    assert "'no_such_step'" in error.message and "not in this instance's definition" in error.message
    error = refused(api, "process.skip", "invalid_params", instance_id=instance_id, element_id="end")
    assert "'end'" in error.message and error.data["cause"] == "not_waiting_here"
    error = refused(api, "process.rewind", "invalid_params", instance_id=instance_id, element_id="end")
    assert "'end'" in error.message and error.data["cause"] == "not_passed"
    with pytest.raises(RpcError) as caught:
        other_api.call("process.skip", instance_id=instance_id, element_id="review")
    assert caught.value.reason == "not_found"
    refused(api, "process.skip", "invalid_params", instance_id=instance_id)  # element_id missing
    api.call("process.cancel", instance_id=instance_id)
    refused(api, "process.skip", "conflict", instance_id=instance_id, element_id="review")


def test_skip_of_an_external_task_takes_it_from_its_worker_and_a_rewind_gives_it_back(api, unique_code):
    topic = f"invoices-{unique_code}"
    api.deploy(bpmn("external_invoice.bpmn").replace('camunda:topic="invoiceCreator"', f'camunda:topic="{topic}"'),
               code=unique_code)
    instance_id = start(api, unique_code)
    fetched = eventually(lambda: api.call("external.fetch_and_lock", worker_id="w1", wait_ms=0,
                                          topics=[{"name": topic, "lock_duration_ms": 60_000}])["tasks"], bool)
    external_id = fetched[0]["task_id"]
    api.wait_until_idle()
    api.call("process.skip", instance_id=instance_id, element_id="invoice", variables={"invoice": "manual"})
    with pytest.raises(RpcError) as caught:  # the worker's late report changes nothing
        api.call("external.complete", task_id=external_id, worker_id="w1", variables={"invoice": "A-1"})
    assert caught.value.reason == "conflict"
    [check] = open_task(api, instance_id, "check")
    assert check["variables"]["invoice"] == "manual"
    rows = api.call("external.list", instance_id=instance_id)["items"]
    assert [(r["task_id"], r["status"]) for r in rows] == [(external_id, "cancelled")]

    api.wait_until_idle()
    answer = api.call("process.rewind", instance_id=instance_id, element_id="invoice")
    assert answer["cancelled"] == [{"element_id": "check", "kind": "userTask"}]
    again = eventually(lambda: api.call("external.fetch_and_lock", worker_id="w2", wait_ms=0,
                                        topics=[{"name": topic, "lock_duration_ms": 60_000}])["tasks"], bool)
    api.call("external.complete", task_id=again[0]["task_id"], worker_id="w2", variables={"invoice": "A-2"})
    [check_again] = open_task(api, instance_id, "check")
    assert check_again["variables"]["invoice"] == "A-2"
    api.call("task.complete", task_id=check_again["task_id"], result={})
    assert api.wait_for(instance_id)["status"] == "completed"


def test_skip_drops_the_timer_of_what_it_skips_in_the_same_transaction(api, database_url, unique_code):
    from sqlalchemy import create_engine, text

    api.deploy(bpmn("cov_boundary_timer_interrupting.bpmn").replace("PT0.1S", "PT1H"), code=unique_code)
    instance_id = start(api, unique_code)
    open_task(api, instance_id, "approve")
    waiting = eventually(lambda: api.call("process.status", instance_id=instance_id)["waiting_for"],
                         lambda entries: any("due_at" in e for e in entries))
    assert waiting
    engine = create_engine(database_url)
    try:
        def timers() -> int:
            with engine.connect() as connection:
                return connection.execute(text("SELECT count(*) FROM jobs WHERE instance_id = :i AND kind = 'timer'"),
                                          {"i": instance_id}).scalar()

        assert timers() == 1
        api.wait_until_idle()
        api.call("process.skip", instance_id=instance_id, element_id="approve")
        done = api.wait_for(instance_id)
        assert done["status"] == "completed" and "escalated" not in done["variables"]
        assert timers() == 0
    finally:
        engine.dispose()


# -- rewind --------------------------------------------------------------------------------------------

@pytest.fixture
def review_flow(api, unique_code):
    callee = f"{unique_code}-tax"
    api.deploy(bpmn("cov_call_activity_callee.bpmn"), code=callee)
    api.deploy(bpmn("repair_review.bpmn").replace('calledElement="cov_call_activity_callee"',
                                                   f'calledElement="{callee}"'), code=unique_code)
    return unique_code


def complete(api, instance_id: int, element_id: str, count: int = 1) -> list[dict]:
    done = open_task(api, instance_id, element_id, count)[:count]
    for task in done:
        api.call("task.complete", task_id=task["task_id"], result={})
    return done


def test_rewind_goes_back_to_a_passed_task_and_cancels_what_was_opened_after_it(api, ops, review_flow):
    operator, name = ops
    instance_id = start(api, review_flow, runs=0, approvers=["ann", "bob"], net=100, country="FR")
    [review] = complete(api, instance_id, "review")
    complete(api, instance_id, "sign")
    first_approval, second_approval = open_task(api, instance_id, "approve", count=2)
    api.call("task.complete", task_id=first_approval["task_id"], result={})
    # Back into a multi-instance that runs: refused, and nothing changes.
    error = refused(api, "process.rewind", "invalid_params", instance_id=instance_id, element_id="approve")
    assert error.data["cause"] == "multi_instance" and "'approve'" in error.message
    api.call("task.complete", task_id=second_approval["task_id"], result={})
    [archive] = open_task(api, instance_id, "archive")
    for element, reason in (("sign", "subprocess_ended"), ("apply", "call_activity_ended"),
                            ("archive", "waiting_here")):
        error = refused(api, "process.rewind", "invalid_params", instance_id=instance_id, element_id=element)
        assert error.data["cause"] == reason and f"'{element}'" in error.message, (element, error)
    refused(api, "process.rewind", "invalid_params", instance_id=instance_id, element_id="nowhere")

    answer = operator.call("process.rewind", instance_id=instance_id, element_id="review", variables={"again": 1})
    assert answer["cancelled"] == [{"element_id": "archive", "kind": "userTask"}] and answer["status"] == "running"
    reopened = open_task(api, instance_id, "review")
    assert [t["task_id"] for t in reopened] == [review["task_id"]]  # the same task, open again
    rows = {t["task_id"]: t["status"] for t in tasks(api, instance_id)}
    assert rows[archive["task_id"]] == "cancelled" and rows[first_approval["task_id"]] == "completed"
    assert api.call("process.status", instance_id=instance_id)["variables"]["again"] == 1
    event = last_event(api, instance_id)
    assert (event["kind"], event["element_id"], event["actor"]["name"]) == ("rewound", "review", name)
    assert event["detail"]["cancelled"] == answer["cancelled"]
    # And it runs on from there as before.
    complete(api, instance_id, "review")
    complete(api, instance_id, "sign")
    complete(api, instance_id, "approve", count=2)
    complete(api, instance_id, "archive")
    assert api.wait_for(instance_id)["status"] == "completed"


def test_a_rewind_that_sends_a_chat_answer_again_is_in_the_history(server, api, unique_code):
    channel = create_channel(api)
    deploy_chat(api, "chat_reply.bpmn", channel["name"], unique_code)
    site = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    chat = f"chat-{uuid.uuid4().hex[:6]}"
    first = accepted(server, site, channel["config_id"], chat_id=chat, text="hello")
    instance_id, binding_id = first["instance_id"], first["binding_id"]

    def answers():
        return [m["text"] for m in api.call("conversation.messages", binding_id=binding_id, per_page=100)["items"]
                if m["direction"] == "out"]

    eventually(answers, lambda texts: len(texts) == 1)
    eventually(lambda: api.call("process.status", instance_id=instance_id)["waiting_for"], bool)
    api.wait_until_idle()
    answer = api.call("process.rewind", instance_id=instance_id, element_id="greet")
    assert answer["cancelled"] == [{"element_id": "wait_reply", "kind": "receiveTask"}]
    texts = eventually(answers, lambda texts: len(texts) == 2)
    assert texts[0] == texts[1] and texts[0].startswith("Hello")
    events = api.call("process.history", instance_id=instance_id, per_page=100)["items"]
    assert [e["kind"] for e in events] == ["started", "message_received", "rewound"]
    assert events[2]["element_id"] == "greet" and events[2]["detail"]["cancelled"] == answer["cancelled"]
    # The conversation goes on: the next message is the awaited answer.
    eventually(lambda: api.call("process.status", instance_id=instance_id)["waiting_for"], bool)
    api.wait_until_idle()
    accepted(server, site, channel["config_id"], chat_id=chat, text="fine")
    assert api.wait_for(instance_id)["status"] == "completed"
    assert "Thanks, noted: fine" in eventually(answers, lambda texts: len(texts) == 3)


def test_a_repair_while_work_of_the_instance_is_due_is_a_conflict_that_changes_nothing(api, unique_code):
    api.deploy(bpmn("wait_for_person.bpmn"), code=unique_code)
    instance_id = start(api, unique_code)
    [task] = open_task(api, instance_id, "review")
    # Ask for the repair in the same batch as the completion: the completion's job is queued first.
    body = [{"jsonrpc": "2.0", "id": 1, "method": "task.complete", "params": {"task_id": task["task_id"]}},
            {"jsonrpc": "2.0", "id": 2, "method": "process.skip",
             "params": {"instance_id": instance_id, "element_id": "review"}}]
    deadline = time.monotonic() + 5
    answers = {item["id"]: item for item in api.post(body).json()}
    assert "result" in answers[1]
    second = answers[2]
    if "error" in second:  # the usual case: the completion had not been applied yet
        assert second["error"]["data"]["reason"] in ("conflict", "invalid_params")
    assert api.wait_for(instance_id)["status"] == "completed" and time.monotonic() < deadline + 20
    kinds = [e["kind"] for e in api.call("process.history", instance_id=instance_id)["items"]]
    assert kinds[:2] == ["started", "task_completed"] and "skipped" not in kinds[:2]


@pytest.mark.slow
def test_a_repair_answered_before_a_kill_9_is_applied_after_the_restart(own_database, tmp_path):
    """The repair's job is committed with its answer and its history: no worker runs while it is
    asked, every process is killed with SIGKILL after it answered, and the restarted ones apply it."""
    from tests.harness import BatonServer, BatonWorker

    server = BatonServer(own_database, tmp_path, BATON_WORKERS="0", BATON_JOB_LEASE_S="2")
    worker = BatonWorker(own_database, tmp_path, BATON_JOB_LEASE_S="2")
    try:
        server.start()
        worker.start()
        api = server.api(server.create_tenant("repairs"))
        api.deploy(bpmn("wait_for_person.bpmn"), code="kill-repair")
        instance_id = start(api, "kill-repair")
        [task] = open_task(api, instance_id, "review")
        api.wait_until_idle()
        worker.kill()  # nothing runs jobs now: the repair's job can only wait in the table
        answer = api.call("process.skip", instance_id=instance_id, element_id="review", variables={"by": "ops"})
        assert answer["status"] == "running"
        server.kill()

        server.start()
        worker.start()
        done = api.wait_for(instance_id, timeout=30)
        assert done["status"] == "completed" and done["variables"] == {"by": "ops"}
        assert [(t["task_id"], t["status"]) for t in tasks(api, instance_id)] == [(task["task_id"], "cancelled")]
        kinds = [e["kind"] for e in api.call("process.history", instance_id=instance_id)["items"]]
        assert kinds == ["started", "skipped", "completed"]
    finally:
        worker.stop()
        server.stop()


def test_rewind_out_of_a_running_subprocess_cancels_what_waits_inside_it(api, review_flow):
    instance_id = start(api, review_flow, runs=0, approvers=["ann"], net=100, country="FR")
    [review] = complete(api, instance_id, "review")
    [sign] = open_task(api, instance_id, "sign")
    api.wait_until_idle()
    preview = api.call("process.rewind", instance_id=instance_id, element_id="review", dry_run=True)
    assert preview["cancelled"] == [{"element_id": "sign", "kind": "userTask"}]
    api.call("process.rewind", instance_id=instance_id, element_id="review")
    assert [t["task_id"] for t in open_task(api, instance_id, "review")] == [review["task_id"]]
    assert {t["task_id"]: t["status"] for t in tasks(api, instance_id)}[sign["task_id"]] == "cancelled"
    complete(api, instance_id, "review")
    [sign_again] = open_task(api, instance_id, "sign")
    assert sign_again["task_id"] != sign["task_id"]
    complete(api, instance_id, "sign")
    complete(api, instance_id, "approve")
    complete(api, instance_id, "archive")
    assert api.wait_for(instance_id)["status"] == "completed"
