"""conversation.* methods: operator replies, active conversations, a conversation's messages."""
from __future__ import annotations

from engine import task_holders
from engine.auth import MAX_NAME
from engine.chat import channel_configs, conversations
from engine.chat.outbox import MAX_TEXT
from rpc.params import optional_one_of, optional_str, page_params, reject_unknown, require_int, require_str
from rpc.registry import RpcMethod
from rpc.tasks import ME, assignee_param


def send(ctx, params):
    reject_unknown(params, {"binding_id", "text"})
    binding_id = require_int(params, "binding_id")
    text = require_str(params, "text", max_len=MAX_TEXT)
    return conversations.send(ctx.uow, ctx.tenant_id, binding_id, text, principal=ctx.principal)


def list_(ctx, params):
    reject_unknown(params, {"channel", "page", "per_page", "assignee", "candidate_group"})
    page, per_page = page_params(params)
    assignee = conversations.ANYONE
    if "assignee" in params:
        assignee = optional_str(params, "assignee", max_len=MAX_NAME)
        if assignee == ME:
            assignee = task_holders.operator_of(ctx.principal)
    return conversations.list_conversations(
        ctx.uow, ctx.tenant_id, channel_type=optional_one_of(params, "channel", channel_configs.TYPES),
        page=page, per_page=per_page, assignee=assignee,
        candidate_group=optional_str(params, "candidate_group", max_len=MAX_NAME))


def claim(ctx, params):
    reject_unknown(params, {"binding_id"})
    return task_holders.claim_conversation(ctx.uow, ctx.principal, require_int(params, "binding_id"))


def assign(ctx, params):
    reject_unknown(params, {"binding_id", "user"})
    binding_id = require_int(params, "binding_id")
    return task_holders.assign_conversation(ctx.uow, ctx.principal, binding_id, assignee_param(params))


def messages(ctx, params):
    reject_unknown(params, {"binding_id", "page", "per_page"})
    page, per_page = page_params(params)
    return conversations.list_messages(ctx.uow, ctx.tenant_id, require_int(params, "binding_id"),
                                       page=page, per_page=per_page)


METHODS = (
    RpcMethod("conversation.send", send),
    RpcMethod("conversation.list", list_),
    RpcMethod("conversation.messages", messages),
    RpcMethod("conversation.claim", claim),
    RpcMethod("conversation.assign", assign),
)
