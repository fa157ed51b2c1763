"""The rows one ``conversations.accept`` writes, column by column: a chat's first message (the
conversation, its message, the instance and its start job) and a later one (the conversation
touched, the message, the instance's ``chat_message`` job). The accept runs Core statements on the
session's connection; these are the rows the ORM wrote before (compared on the old code too)."""
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import delete, select, text

from engine import definitions
from engine.auth import create_tenant
from engine.chat import channel_configs, conversations, outbox
from engine.jobs.kinds import CHAT_MESSAGE, START
from engine.store.db import db
from engine.store.models import Channel, Conversation, Delivery, Instance, Job, Message
from tests.harness import bpmn

TIMES = ("started_at", "last_message_at", "customer_wrote_at", "created_at", "run_at")


@pytest.fixture
def channel(app, uow):
    with app.app_context():
        uow.session.execute(delete(Job))
        uow.commit()
        tenant, _key = create_tenant(uow, f"t-{uuid.uuid4().hex[:10]}")
        created = channel_configs.create_webchat(uow, tenant.id, name=f"site-{uuid.uuid4().hex[:6]}",
                                                 webhook_url="http://127.0.0.1:9/chat", webhook_secret=None,
                                                 settings=None, allow_private=True)
        xml = bpmn("chat_reply.bpmn").replace("__CHANNEL__", str(created["config_id"]))
        deployed = definitions.deploy(uow, tenant.id, xml, f"chat-{uuid.uuid4().hex[:6]}", public_url="http://127.0.0.1")
        uow.commit()
        yield tenant.id, created["config_id"], deployed["definition_id"]
        uow.rollback()
        db.session.remove()


def _row(table, *conditions) -> dict:
    row = db.session.execute(select(table.__table__).where(*conditions)).one()._asdict()
    for key in TIMES:
        if key in row:
            assert row.pop(key) is not None, key
    return row


def _say(uow, config_id: int, chat_id: str, text: str, **who) -> dict:
    return conversations.accept(uow, uow.session.get(Channel, config_id),
                                conversations.Arrival(chat_id=chat_id, text=text, **who))


def test_a_first_message_writes_its_conversation_message_instance_and_start_job(channel, uow):
    tenant_id, config_id, definition_id = channel
    answer = _say(uow, config_id, "c-1", "hello ✓", user_id="u-1", username="Zoë")
    binding_id, instance_id = answer["binding_id"], answer["instance_id"]
    variables = {"message_text": "hello ✓", "external_username": "Zoë", "external_user_id": "u-1",
                 "channel": "webchat", "chat_id": "c-1", "binding_id": binding_id}

    assert _row(Conversation, Conversation.id == binding_id) == {
        "id": binding_id, "tenant_id": tenant_id, "channel_id": config_id, "chat_id": "c-1",
        "instance_id": instance_id, "status": "active", "external_user_id": "u-1", "external_username": "Zoë",
        "closed_at": None, "assignee": None, "candidate_group": None}
    assert _row(Message, Message.id == answer["message_id"]) == {
        "id": answer["message_id"], "tenant_id": tenant_id, "conversation_id": binding_id, "direction": "in",
        "author": "customer", "text": "hello ✓", "delivery_id": None, "reply_to_id": None, "content": None}
    stored = uow.session.execute(text("SELECT content IS NULL FROM messages WHERE id = :id"),
                                {"id": answer["message_id"]}).scalar_one()
    assert stored in (False, 0)  # the JSON text null, as the ORM wrote it (not SQL NULL)
    instance = _row(Instance, Instance.id == instance_id)
    assert (instance["tenant_id"], instance["definition_id"], instance["status"], instance["variables"],
            instance["revision"], instance["state"]) == (tenant_id, definition_id, "running", variables, 0, None)
    job = _row(Job, Job.instance_id == instance_id)
    assert (job["kind"], job["payload"], job["attempts"], job["locked_by"]) == (
        START, {"variables": variables, "start_event": "chat_start"}, 0, None)
    uow.rollback()


def test_a_later_message_touches_the_conversation_and_queues_a_chat_message(channel, uow):
    tenant_id, config_id, _definition_id = channel
    first = _say(uow, config_id, "c-2", "one", user_id="u-2")
    second = _say(uow, config_id, "c-2", "two", username="Ann")
    assert (second["binding_id"], second["instance_id"]) == (first["binding_id"], first["instance_id"])

    conversation = _row(Conversation, Conversation.id == first["binding_id"])
    assert (conversation["external_user_id"], conversation["external_username"], conversation["status"]) == (
        "u-2", "Ann", "active")
    assert _row(Message, Message.id == second["message_id"])["text"] == "two"
    [job] = [_row(Job, Job.id == job_id) for job_id in uow.session.execute(
        select(Job.id).where(Job.instance_id == first["instance_id"], Job.kind == CHAT_MESSAGE)).scalars()]
    assert job["payload"] == {"variables": {
        "message_text": "two", "external_username": "Ann", "external_user_id": "u-2", "channel": "webchat",
        "chat_id": "c-2", "binding_id": first["binding_id"]}}
    uow.rollback()


def test_an_operator_reply_writes_its_message_and_delivery(channel, uow):
    tenant_id, config_id, _definition_id = channel
    first = _say(uow, config_id, "c-3", "help?")
    sent = conversations.send(uow, tenant_id, first["binding_id"], "On it ✓")

    message = _row(Message, Message.id == sent["message_id"])
    delivery_id = message.pop("delivery_id")
    assert message == {"id": sent["message_id"], "tenant_id": tenant_id, "conversation_id": first["binding_id"],
                       "direction": "out", "author": "operator", "text": "On it ✓", "reply_to_id": None,
                       "content": None}
    queued = uow.session.execute(select(Delivery.tenant_id, Delivery.channel_id, Delivery.ordering_key,
                                       Delivery.status, Delivery.body).where(Delivery.id == delivery_id)).one()
    assert queued[:4] == (tenant_id, config_id, f"{config_id}:c-3", "queued")
    assert '"text":"On it ✓"' in queued.body and '"chat_id":"c-3"' in queued.body
    stored = uow.session.execute(text("SELECT content IS NULL FROM messages WHERE id = :id"),
                                {"id": sent["message_id"]}).scalar_one()
    assert stored in (False, 0)  # the JSON text null, as the ORM wrote it
    uow.rollback()


def test_an_ended_instance_closes_its_conversation(channel, uow):
    _tenant_id, config_id, _definition_id = channel
    first = _say(uow, config_id, "c-4", "bye")
    outbox.close_for_instance(uow, first["instance_id"])
    uow.commit()

    conversation = uow.session.execute(select(Conversation.status, Conversation.closed_at)
                                      .where(Conversation.id == first["binding_id"])).one()
    assert conversation.status == "closed" and conversation.closed_at is not None
    assert outbox.active_conversation(uow, first["instance_id"]) is None
    uow.rollback()
