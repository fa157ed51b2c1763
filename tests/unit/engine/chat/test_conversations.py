"""``conversations.accept`` on a real database: a chat's first message starts the channel's process
and opens its conversation in one transaction; later messages go to that conversation's instance
in order; a channel no process listens to refuses the message and stores nothing."""
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import delete, func, select

from engine import definitions
from engine.auth import create_tenant
from engine.chat import channel_configs, conversations
from engine.errors import ConflictError
from engine.jobs.kinds import CHAT_MESSAGE, START
from engine.store.db import db
from engine.store.models import Channel, Conversation, Job, Message
from tests.harness import bpmn


@pytest.fixture
def channel(app, uow):
    with app.app_context():
        uow.session.execute(delete(Job))
        uow.commit()
        tenant, _key = create_tenant(uow, f"t-{uuid.uuid4().hex[:10]}")
        created = channel_configs.create_webchat(uow, tenant.id, name=f"site-{uuid.uuid4().hex[:6]}",
                                                 webhook_url="http://127.0.0.1:9/chat", webhook_secret=None,
                                                 settings=None, allow_private=True)
        uow.commit()
        yield tenant.id, uow.session.get(Channel, created["config_id"])
        uow.rollback()
        db.session.remove()


def _deploy(uow, tenant_id: int, channel: Channel) -> None:
    xml = bpmn("chat_reply.bpmn").replace("__CHANNEL__", str(channel.id))
    definitions.deploy(uow, tenant_id, xml, f"chat-{uuid.uuid4().hex[:6]}", public_url="http://127.0.0.1")


def _say(uow, channel: Channel, chat_id: str, text: str) -> dict:
    return conversations.accept(uow, uow.session.get(Channel, channel.id), conversations.Arrival(
        chat_id=chat_id, text=text, user_id="u-1", username="Zoë"))


def test_a_first_message_starts_the_process_and_opens_the_conversation(channel, uow):
    tenant_id, chat_channel = channel
    _deploy(uow, tenant_id, chat_channel)
    answer = _say(uow, chat_channel, "c-1", "hello")
    conversation = uow.session.get(Conversation, answer["binding_id"])
    assert (conversation.status, conversation.instance_id, conversation.chat_id) == (
        "active", answer["instance_id"], "c-1")
    [job] = uow.session.execute(select(Job).where(Job.instance_id == answer["instance_id"])).scalars()
    assert job.kind == START and job.payload["variables"]["message_text"] == "hello"
    assert job.payload["variables"]["binding_id"] == answer["binding_id"]
    uow.rollback()


def test_later_messages_go_to_the_open_conversation_in_order(channel, uow):
    tenant_id, chat_channel = channel
    _deploy(uow, tenant_id, chat_channel)
    first = _say(uow, chat_channel, "c-2", "one")
    second, third = _say(uow, chat_channel, "c-2", "two"), _say(uow, chat_channel, "c-2", "three")
    assert {second["instance_id"], third["instance_id"]} == {first["instance_id"]}
    queued = uow.session.execute(select(Job.kind, Job.payload).where(Job.instance_id == first["instance_id"])
                                .order_by(Job.id)).all()
    assert [(kind, payload.get("variables", {}).get("message_text")) for kind, payload in queued] == [
        (START, "one"), (CHAT_MESSAGE, "two"), (CHAT_MESSAGE, "three")]
    uow.rollback()


def test_a_channel_no_process_listens_to_refuses_and_stores_nothing(channel, uow):
    _tenant_id, chat_channel = channel
    with pytest.raises(ConflictError, match="No process is bound"):
        _say(uow, chat_channel, "c-3", "anyone?")
    uow.rollback()
    counts = [uow.session.execute(select(func.count()).select_from(table).where(condition)).scalar_one()
              for table, condition in ((Conversation, Conversation.channel_id == chat_channel.id),
                                       (Message, Message.tenant_id == chat_channel.tenant_id))]
    assert counts == [0, 0]
    uow.rollback()
