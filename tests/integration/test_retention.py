"""Retention (BATON_RETENTION_DAYS) through a real server on both databases: the ``flask --app app
retention`` command and the workers' recurring job remove what ended long ago and what hangs off
it, exactly, and nothing a running instance still needs.

"Long ago" is made by moving the stored end times back (the rows are otherwise real, made by the
real server); the server's clock is never touched.
"""
from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import requests
from sqlalchemy import create_engine, func, select, update

from engine.store.models import (AiDialog, Conversation, Delivery, EventSubscription, ExternalTaskRow, HistoryEvent,
                                 IdempotencyRecord, InboundReceipt, Instance, Job, Message, Task)
from tests.conftest import make_database_url
from tests.harness import ROOT, BatonServer, BatonWorker, RpcError, bpmn, drop_postgres_database
from tests.integration.test_webchat import accepted, create_channel, deploy_chat, eventually
from tests.receiver import Answer, Receiver

MODELS = {"instances": Instance, "tasks": Task, "external_tasks": ExternalTaskRow,
          "event_subscriptions": EventSubscription, "jobs": Job, "history_events": HistoryEvent, "ai_dialogs": AiDialog,
          "conversations": Conversation, "messages": Message, "deliveries": Delivery,
          "idempotency_records": IdempotencyRecord, "inbound_receipts": InboundReceipt}
LONG_AGO = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(days=31)  # past the default 30


@pytest.fixture
def database(backend, tmp_path_factory):
    url = make_database_url(backend, tmp_path_factory)
    engine = create_engine(url)
    yield url, engine
    engine.dispose()
    if backend == "postgresql":
        drop_postgres_database(url)


@pytest.fixture
def receivers():
    good, failing = Receiver().start(), Receiver(default=Answer(500)).start()
    yield good, failing
    good.stop()
    failing.stop()


def counts(engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {name: connection.execute(select(func.count()).select_from(model)).scalar()
                for name, model in MODELS.items()}


def hanging_off(engine, instance_ids: list[int]) -> dict[str, int]:
    """The rows of each table that belong to these instances: what retention must remove with them."""
    with engine.connect() as connection:
        chats = list(connection.execute(select(Conversation.id).where(Conversation.instance_id.in_(instance_ids)))
                     .scalars())
        found = {name: connection.execute(select(func.count()).select_from(model)
                                          .where(model.instance_id.in_(instance_ids))).scalar()
                 for name, model in (("tasks", Task), ("external_tasks", ExternalTaskRow),
                                     ("event_subscriptions", EventSubscription), ("jobs", Job),
                                     ("history_events", HistoryEvent), ("ai_dialogs", AiDialog),
                                     ("conversations", Conversation))}
        found["messages"] = connection.execute(select(func.count()).select_from(Message)
                                               .where(Message.conversation_id.in_(chats or [0]))).scalar()
        found["deliveries"] = connection.execute(select(func.count()).select_from(Delivery).where(
            Delivery.status == "sent",
            Delivery.id.in_(select(Message.delivery_id).where(Message.conversation_id.in_(chats or [0]))))).scalar()
    return {"instances": len(instance_ids), **found}


def age(engine, instance_ids: list[int]) -> None:
    """Move the end of these instances, of their conversations and of their messages' deliveries
    31 days back: as if they had ended then."""
    with engine.begin() as connection:
        connection.execute(update(Instance).where(Instance.id.in_(instance_ids), Instance.completed_at.is_not(None))
                           .values(completed_at=LONG_AGO))
        connection.execute(update(Instance).where(Instance.id.in_(instance_ids)).values(started_at=LONG_AGO))
        chats = select(Conversation.id).where(Conversation.instance_id.in_(instance_ids))
        connection.execute(update(Conversation).where(Conversation.id.in_(chats), Conversation.closed_at.is_not(None))
                           .values(closed_at=LONG_AGO))
        deliveries = select(Message.delivery_id).where(Message.conversation_id.in_(chats))
        connection.execute(update(Delivery).where(Delivery.id.in_(deliveries), Delivery.sent_at.is_not(None))
                           .values(sent_at=LONG_AGO))
        connection.execute(update(Delivery).where(Delivery.id.in_(deliveries)).values(created_at=LONG_AGO))


def removed_by_command(server) -> dict[str, int]:
    result = server.command("retention")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("Removed what ended before "), result.stdout
    return {name: int(count) for name, count in (line.split() for line in lines[1:])}


def not_found(api, method: str, **params) -> bool:
    with pytest.raises(RpcError) as caught:
        api.call(method, **params)
    return caught.value.reason == "not_found"


def gone(api, instance_id: int) -> bool:
    """Whether ``process.status`` answers ``not_found`` (False while the instance is still there)."""
    try:
        api.call("process.status", instance_id=instance_id)
    except RpcError as error:
        return error.reason == "not_found"
    return False


def start_order(url: str, **headers) -> int:
    response = requests.post(url, json={"amount": 60}, headers=headers, timeout=30)
    assert response.status_code == 202, response.text
    return response.json()["instance_id"]


@pytest.mark.slow
def test_the_command_removes_old_ended_instances_and_what_hangs_off_them_and_nothing_else(
        database, receivers, tmp_path):
    url, engine = database
    good, failing = receivers
    server = BatonServer(url, tmp_path, BATON_DELIVERY_RETRY_SCALE="0.00001").start()
    try:
        api = server.api(server.create_tenant(f"ret-{uuid.uuid4().hex[:8]}"))
        chat_key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
        order = api.deploy(bpmn("webhook_order.bpmn"), code="order")["webhooks"][0]["url"]
        api.deploy(bpmn("wait_for_person.bpmn"), code="person")
        api.deploy(bpmn("failing_script.bpmn"), code="failing")
        answered = create_channel(api, f"{good.url}/chat")
        refused = create_channel(api, f"{failing.url}/chat")
        deploy_chat(api, "chat_reply.bpmn", answered["name"], "chat-answered")
        deploy_chat(api, "chat_reply.bpmn", refused["name"], "chat-refused")

        old_orders = [start_order(order) for _ in range(3)]
        recent_order = start_order(order)
        keyed_old, keyed_new = (start_order(order, **{"Idempotency-Key": key}) for key in ("k-old", "k-new"))
        running_person = api.call("process.start", definition_id="person")["instance_id"]
        done_person = api.call("process.start", definition_id="person")["instance_id"]
        cancelled_person = api.call("process.start", definition_id="person")["instance_id"]
        failed = api.call("process.start", definition_id="failing")["instance_id"]
        task_of = {}
        for instance_id in (running_person, done_person, cancelled_person):
            found = eventually(lambda i=instance_id: api.call("task.list", instance_id=i)["items"], bool)
            task_of[instance_id] = found[0]["task_id"]
        api.call("task.complete", task_id=task_of[done_person], result={})
        api.call("process.cancel", instance_id=cancelled_person)
        # A chat that ended (two answers sent), one that is still running (its answer sent long
        # ago), and one whose answer went dead before it was cancelled.
        ended_chat = accepted(server, chat_key, answered["config_id"], chat_id="c-ended", text="hi")
        good.wait_for(1)
        accepted(server, chat_key, answered["config_id"], chat_id="c-ended", text="bye")
        running_chat = accepted(server, chat_key, answered["config_id"], chat_id="c-running", text="hi")
        dead_chat = accepted(server, chat_key, refused["config_id"], chat_id="c-dead", text="hi")
        dead = eventually(lambda: api.call("delivery.list", status="dead")["items"], bool)
        api.call("process.cancel", instance_id=dead_chat["instance_id"])
        for instance_id in (*old_orders, recent_order, keyed_old, keyed_new, done_person, failed,
                            ended_chat["instance_id"]):
            api.wait_for(instance_id)
        api.wait_until_idle()

        old = [*old_orders, keyed_old, done_person, cancelled_person, failed, ended_chat["instance_id"],
               dead_chat["instance_id"]]
        age(engine, old + [running_person, running_chat["instance_id"]])
        with engine.begin() as connection:
            connection.execute(update(IdempotencyRecord).where(IdempotencyRecord.key == "k-old")
                               .values(created_at=LONG_AGO))
        expected = hanging_off(engine, old)
        expected["idempotency_records"] = 1
        assert expected["conversations"] == 2 and expected["messages"] == 6 and expected["deliveries"] == 2
        assert expected["tasks"] == 2
        before = counts(engine)

        removed = removed_by_command(server)

        assert {k: v for k, v in removed.items() if v} == {k: v for k, v in expected.items() if v}
        after = counts(engine)
        assert {name: before[name] - after[name] for name in MODELS} == {name: removed.get(name, 0) for name in MODELS}
        for instance_id in old:
            assert not_found(api, "process.status", instance_id=instance_id)
        assert not_found(api, "conversation.messages", binding_id=ended_chat["binding_id"])
        # What stays: the recent, the running (with its task, its conversation and the delivery
        # its conversation still shows) and the dead delivery, which waits for delivery.retry.
        assert api.call("process.status", instance_id=recent_order)["status"] == "completed"
        assert api.call("process.status", instance_id=keyed_new)["status"] == "completed"
        assert api.call("process.status", instance_id=running_person)["status"] == "running"
        assert [m["delivery"] for m in api.call("conversation.messages", binding_id=running_chat["binding_id"])
                ["items"]] == ["sent", None]
        assert [d["delivery_id"] for d in api.call("delivery.list", status="dead")["items"]] == [dead[0]["delivery_id"]]
        assert api.call("delivery.retry", delivery_id=dead[0]["delivery_id"])["status"] == "queued"
        again = requests.post(order, json={}, headers={"Idempotency-Key": "k-new"}, timeout=30).json()
        assert again["instance_id"] == keyed_new  # the fresh record still replays
        api.call("task.complete", task_id=task_of[running_person], result={})
        assert api.wait_for(running_person)["status"] == "completed"

        assert set(removed_by_command(server).values()) == {0}  # nothing left to remove: a second run is a no-op
    finally:
        server.stop()


@pytest.mark.slow
def test_the_workers_remove_old_instances_on_their_schedule_with_one_job_between_them(database, tmp_path):
    url, engine = database
    server = BatonServer(url, tmp_path, BATON_WORKERS="0").start()
    workers = []
    try:
        api = server.api(server.create_tenant(f"ret-{uuid.uuid4().hex[:8]}"))
        order = api.deploy(bpmn("webhook_order.bpmn"), code="order")["webhooks"][0]["url"]
        api.deploy(bpmn("wait_for_person.bpmn"), code="person")
        # Two worker processes, both told to keep the schedule; every 0.2 s so the test need not wait.
        workers = [BatonWorker(url, tmp_path, BATON_RETENTION_EVERY_S="0.2").start() for _ in range(2)]
        old = [start_order(order) for _ in range(5)]
        recent = start_order(order)
        running = api.call("process.start", definition_id="person")["instance_id"]
        for instance_id in (*old, recent):
            api.wait_for(instance_id)
        age(engine, old + [running])

        for instance_id in old:
            eventually(lambda i=instance_id: gone(api, i), bool)
        assert api.call("process.status", instance_id=recent)["status"] == "completed"
        assert api.call("process.status", instance_id=running)["status"] == "running"
        with engine.connect() as connection:
            schedule = connection.execute(select(Job.run_at).where(Job.kind == "retention")).scalars().all()
        assert len(schedule) == 1
    finally:
        for worker in workers:
            worker.stop()
        server.stop()


def test_retention_days_zero_keeps_everything_and_the_command_says_so(database, tmp_path):
    url, engine = database
    server = BatonServer(url, tmp_path, BATON_RETENTION_DAYS="0").start()
    try:
        api = server.api(server.create_tenant(f"ret-{uuid.uuid4().hex[:8]}"))
        order = api.deploy(bpmn("webhook_order.bpmn"), code="order")["webhooks"][0]["url"]
        instance_id = start_order(order)
        api.wait_for(instance_id)
        age(engine, [instance_id])
        result = server.command("retention")
        assert result.returncode == 0 and "Retention is off" in result.stdout
        assert api.call("process.status", instance_id=instance_id)["status"] == "completed"
        with engine.connect() as connection:
            assert connection.execute(select(func.count()).select_from(Job).where(Job.kind == "retention")).scalar() == 0
        once = server.command("retention", "--days", "30")  # an operator may still remove once, by hand
        assert once.returncode == 0 and "instances 1" in once.stdout.splitlines()
        assert not_found(api, "process.status", instance_id=instance_id)
        refused = server.command("retention", "--days", "-1")
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
    finally:
        server.stop()


def test_the_embedded_server_removes_on_its_schedule_and_counts_what_it_removed(database, tmp_path):
    url, engine = database
    server = BatonServer(url, tmp_path, BATON_RETENTION_EVERY_S="0.2").start()
    try:
        api = server.api(server.create_tenant(f"ret-{uuid.uuid4().hex[:8]}"))
        order = api.deploy(bpmn("webhook_order.bpmn"), code="order")["webhooks"][0]["url"]
        old = [start_order(order) for _ in range(3)]
        for instance_id in old:
            api.wait_for(instance_id)
        age(engine, old)
        for instance_id in old:
            eventually(lambda i=instance_id: gone(api, i), bool)
        scraped = requests.get(server.base_url + "/metrics", timeout=10).text
        [line] = [line for line in scraped.splitlines()
                  if line.startswith('baton_retention_removed_total{table="instances"}')]
        assert float(line.split()[1]) == 3.0
    finally:
        server.stop()


@pytest.mark.slow
def test_two_purges_at_once_remove_each_instance_once_and_fail_nothing(database, tmp_path):
    """The job and the command (or two workers) may purge together: whether their batches of 10
    interleave or not (both were seen), every aged instance is removed exactly once between them."""
    url, engine = database
    server = BatonServer(url, tmp_path, BATON_RETENTION_BATCH="10").start()
    try:
        api = server.api(server.create_tenant(f"ret-{uuid.uuid4().hex[:8]}"))
        order = api.deploy(bpmn("webhook_order.bpmn"), code="order")["webhooks"][0]["url"]
        old = [start_order(order) for _ in range(120)]
        api.wait_until_idle(60)
        age(engine, old)
        command = [sys.executable, "-m", "flask", "--app", "app", "retention"]
        both = [subprocess.Popen(command, cwd=ROOT, env=server.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for _ in range(2)]
        outputs = [process.communicate(timeout=120) for process in both]
        assert [process.returncode for process in both] == [0, 0], outputs
        removed = [dict(line.split() for line in out.strip().splitlines()[1:]) for out, _ in outputs]
        assert sum(int(r["instances"]) for r in removed) == 120
        assert all(gone(api, instance_id) for instance_id in old)
    finally:
        server.stop()
