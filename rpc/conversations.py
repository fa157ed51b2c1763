"""conversation.* methods: operator replies, active conversations, a conversation's messages, and who
holds a conversation."""
from __future__ import annotations

from engine import task_holders
from engine.auth import MAX_NAME
from engine.chat import channel_configs, conversations
from engine.chat.outbox import MAX_TEXT
from rpc.registry import RpcMethod
from bpmn.profile import DEFAULT_TEMPLATE_LANGUAGE, MAX_TEMPLATE_PARAM, MAX_TEMPLATE_PARAMS
from rpc.schema import (ID, INT, PAGING, TEXT, TIME, Choice, ListOf, Param, Record, Text, nullable, obj, one_of,
                        page_of)
from rpc.tasks import ASSIGNEE, ME, assignee_of


def send(ctx, params):
    return conversations.send(ctx.uow, ctx.tenant_id, params["binding_id"], params.get("text"), principal=ctx.principal,
                              template=params.get("template"))


def list_(ctx, params):
    assignee = conversations.ANYONE
    if "assignee" in params:
        assignee = params["assignee"]
        if assignee == ME:
            assignee = task_holders.user_of_key(ctx.principal)
    return conversations.list_conversations(
        ctx.uow, ctx.tenant_id, channel_type=params.get("channel"), page=params["page"],
        per_page=params["per_page"], assignee=assignee, candidate_group=params.get("candidate_group"))


def messages(ctx, params):
    return conversations.list_messages(ctx.uow, ctx.tenant_id, params["binding_id"], page=params["page"],
                                       per_page=params["per_page"])


def claim(ctx, params):
    return task_holders.claim_conversation(ctx.uow, ctx.principal, params["binding_id"])


def assign(ctx, params):
    return task_holders.assign_conversation(ctx.uow, ctx.principal, params["binding_id"], assignee_of(params))


BINDING = Param("binding_id", ID, required=True)
CHANNEL_TYPE = one_of(*channel_configs.TYPES)
CONVERSATION = obj(binding_id=INT, channel=CHANNEL_TYPE, config_id=INT, chat_id=TEXT,
                   external_user_id=nullable(TEXT), external_username=nullable(TEXT), instance_id=INT,
                   started_at=TIME, last_message_at=nullable(TIME), assignee=nullable(TEXT),
                   candidate_group=nullable(TEXT), customer_wrote_at=nullable(TIME), window_closes_at=nullable(TIME))
TEMPLATE = Param("template", Record((
    Param("name", Text(max_len=512), required=True, description="the approved template's name in WhatsApp Manager"),
    Param("language", Text(max_len=16), description=f"its language code (default {DEFAULT_TEMPLATE_LANGUAGE})"),
    Param("params", ListOf(Text(max_len=MAX_TEMPLATE_PARAM), max_items=MAX_TEMPLATE_PARAMS, noun="strings"),
          description="the values of its body's {{1}}, {{2}} ... in order"))),
    description="WhatsApp: a message template, sent instead of the text when the 24-hour window is closed "
                "(alone: always sent)")
MESSAGE = obj(message_id=INT, direction=one_of("in", "out"), text=TEXT,
              author=one_of("customer", "ai", "operator", "process"), created_at=TIME,
              delivery=nullable(one_of("queued", "sent", "dead")))
HOLDER = obj(binding_id=INT, status=TEXT, assignee=nullable(TEXT), candidate_group=nullable(TEXT))

METHODS = (
    RpcMethod("conversation.send", send, summary="An operator's reply into a conversation, queued for delivery.",
              params=(BINDING, Param("text", Text(max_len=MAX_TEXT), description="required unless a template is given"),
                      TEMPLATE),
              result=obj(binding_id=INT, message_id=INT, status=one_of("queued"))),
    RpcMethod("conversation.list", list_, summary="The active conversations, newest first.",
              params=(Param("channel", Choice(channel_configs.TYPES)),
                      Param("assignee", Text(max_len=MAX_NAME), nullable=True,
                            description=f"held by this user; '{ME}': the key's user; null: held by nobody"),
                      Param("candidate_group", Text(max_len=MAX_NAME), description="offered to this group"),
                      *PAGING),
              result=page_of(CONVERSATION)),
    RpcMethod("conversation.messages", messages, summary="A conversation's messages, newest first.",
              params=(BINDING, *PAGING),
              result=page_of(MESSAGE, binding_id=INT, channel=CHANNEL_TYPE, config_id=INT, chat_id=TEXT)),
    RpcMethod("conversation.claim", claim, summary="Hold a conversation for the key's user; of two claims one wins.",
              params=(BINDING,), result=HOLDER),
    RpcMethod("conversation.assign", assign, summary="Hand a conversation to a user, or to nobody.",
              params=(BINDING, ASSIGNEE), result=HOLDER),
)
