"""channel.* methods (permission ``admin``): web-chat channel configurations. Secrets are never returned."""
from __future__ import annotations

from flask import current_app

from engine import channels
from engine.errors import InvalidParamsError
from rpc.params import (optional_dict, optional_one_of, optional_str, page_params, reject_unknown,
                        require_int, require_one_of, require_str)
from rpc.registry import rpc_method

MAX_URL = 2000


def _allow_private() -> bool:
    return current_app.extensions["baton"].settings.allow_private_urls


@rpc_method("channel.create", permission="admin")
def create(ctx, params):
    reject_unknown(params, {"type", "name", "webhook_url", "webhook_secret", "settings"})
    return channels.create(
        ctx.tenant_id, type_=require_one_of(params, "type", channels.TYPES),
        name=require_str(params, "name", max_len=channels.MAX_NAME),
        webhook_url=optional_str(params, "webhook_url", max_len=MAX_URL),
        webhook_secret=optional_str(params, "webhook_secret", max_len=255),
        settings=optional_dict(params, "settings"), allow_private=_allow_private())


@rpc_method("channel.update", permission="admin")
def update(ctx, params):
    reject_unknown(params, {"config_id", "name", "webhook_url", "webhook_secret", "enabled"})
    enabled = params.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise InvalidParamsError("Parameter 'enabled' must be true or false.", data={"param": "enabled"})
    changes = {}
    if "webhook_secret" in params:  # null removes the secret; leaving it out keeps it
        changes["webhook_secret"] = optional_str(params, "webhook_secret", max_len=255)
    return channels.update_channel(
        ctx.tenant_id, require_int(params, "config_id"), allow_private=_allow_private(),
        name=optional_str(params, "name", max_len=channels.MAX_NAME),
        webhook_url=optional_str(params, "webhook_url", max_len=MAX_URL), enabled=enabled, **changes)


@rpc_method("channel.list", permission="admin")
def list_(ctx, params):
    reject_unknown(params, {"type", "page", "per_page"})
    page, per_page = page_params(params)
    return channels.list_channels(ctx.tenant_id, type_=optional_one_of(params, "type", channels.TYPES),
                                  page=page, per_page=per_page)


@rpc_method("channel.delete", permission="admin")
def delete(ctx, params):
    reject_unknown(params, {"config_id"})
    return channels.delete_channel(ctx.tenant_id, require_int(params, "config_id"))
