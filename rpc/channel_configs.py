"""channel.* methods (permission ``admin``): web-chat channel configurations. Secrets are never returned."""
from __future__ import annotations

from engine.chat import channel_configs
from engine.errors import InvalidParamsError
from rpc.params import (optional_dict, optional_one_of, optional_str, page_params, reject_unknown,
                        require_int, require_one_of, require_str)
from rpc.registry import RpcMethod

MAX_URL = 2000


def create(ctx, params):
    reject_unknown(params, {"type", "name", "webhook_url", "webhook_secret", "settings"})
    return channel_configs.create(
        ctx.tenant_id, type_=require_one_of(params, "type", channel_configs.TYPES),
        name=require_str(params, "name", max_len=channel_configs.MAX_NAME),
        webhook_url=optional_str(params, "webhook_url", max_len=MAX_URL),
        webhook_secret=optional_str(params, "webhook_secret", max_len=255),
        settings=optional_dict(params, "settings"), allow_private=ctx.settings.allow_private_urls)


def update(ctx, params):
    reject_unknown(params, {"config_id", "name", "webhook_url", "webhook_secret", "enabled"})
    enabled = params.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise InvalidParamsError("Parameter 'enabled' must be true or false.", data={"param": "enabled"})
    changes = {}
    if "webhook_secret" in params:  # null removes the secret; leaving it out keeps it
        changes["webhook_secret"] = optional_str(params, "webhook_secret", max_len=255)
    return channel_configs.update_channel(
        ctx.tenant_id, require_int(params, "config_id"), allow_private=ctx.settings.allow_private_urls,
        name=optional_str(params, "name", max_len=channel_configs.MAX_NAME),
        webhook_url=optional_str(params, "webhook_url", max_len=MAX_URL), enabled=enabled, **changes)


def list_(ctx, params):
    reject_unknown(params, {"type", "page", "per_page"})
    page, per_page = page_params(params)
    return channel_configs.list_channels(ctx.tenant_id, type_=optional_one_of(params, "type", channel_configs.TYPES),
                                  page=page, per_page=per_page)


def delete(ctx, params):
    reject_unknown(params, {"config_id"})
    return channel_configs.delete_channel(ctx.tenant_id, require_int(params, "config_id"))


METHODS = (
    RpcMethod("channel.create", create, "admin"),
    RpcMethod("channel.update", update, "admin"),
    RpcMethod("channel.list", list_, "admin"),
    RpcMethod("channel.delete", delete, "admin"),
)
