"""conversation.* methods: operator replies, active conversations, a conversation's messages."""
from __future__ import annotations

from engine.chat import channel_configs, conversations
from engine.chat.outbox import MAX_TEXT
from rpc.params import optional_one_of, page_params, reject_unknown, require_int, require_str
from rpc.registry import RpcMethod


def send(ctx, params):
    reject_unknown(params, {"binding_id", "text"})
    binding_id = require_int(params, "binding_id")
    text = require_str(params, "text", max_len=MAX_TEXT)
    return conversations.send(ctx.uow, ctx.tenant_id, binding_id, text)


def list_(ctx, params):
    reject_unknown(params, {"channel", "page", "per_page"})
    page, per_page = page_params(params)
    return conversations.list_conversations(
        ctx.uow, ctx.tenant_id, channel_type=optional_one_of(params, "channel", channel_configs.TYPES),
        page=page, per_page=per_page)


def messages(ctx, params):
    reject_unknown(params, {"binding_id", "page", "per_page"})
    page, per_page = page_params(params)
    return conversations.list_messages(ctx.uow, ctx.tenant_id, require_int(params, "binding_id"),
                                       page=page, per_page=per_page)


METHODS = (
    RpcMethod("conversation.send", send),
    RpcMethod("conversation.list", list_),
    RpcMethod("conversation.messages", messages),
)
