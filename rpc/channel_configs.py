"""channel.* methods (permission ``admin``): web-chat and messenger channels. Secrets are never returned.

A web-chat channel is configured with the caller's ``webhook_url`` / ``webhook_secret``; a messenger
channel with its ``settings`` (INTERFACE §4.4), and creating or re-enabling it connects to the
messenger (``engine.chat.channel_configs``).
"""
from __future__ import annotations

from engine.chat import channel_configs
from engine.chat.messengers.registry import MESSENGERS
from engine.errors import InvalidParamsError
from rpc.params import (optional_dict, optional_one_of, optional_str, page_params, reject_unknown,
                        require_int, require_one_of, require_str)
from rpc.registry import RpcMethod

MAX_URL = 2000
_WEBCHAT_ONLY = ("webhook_url", "webhook_secret")


def messenger_config(settings) -> channel_configs.MessengerConfig:
    return channel_configs.MessengerConfig(
        messengers=MESSENGERS, public_url=settings.public_url, allow_private=settings.allow_private_urls,
        api_urls=settings.messenger_api_urls)


def _refuse_webchat_params(params, type_: str) -> None:
    for name in _WEBCHAT_ONLY:
        if params.get(name) is not None:
            raise InvalidParamsError(f"A {type_} channel takes no '{name}': Baton registers its own webhook "
                                     "with the messenger.", data={"param": name})


def _enabled(params) -> bool | None:
    enabled = params.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise InvalidParamsError("Parameter 'enabled' must be true or false.", data={"param": "enabled"})
    return enabled


def create(ctx, params):
    reject_unknown(params, {"type", "name", "webhook_url", "webhook_secret", "settings"})
    type_ = require_one_of(params, "type", channel_configs.TYPES)
    name = require_str(params, "name", max_len=channel_configs.MAX_NAME)
    if type_ in MESSENGERS:
        _refuse_webchat_params(params, type_)
        return channel_configs.create_messenger(ctx.uow, ctx.tenant_id, type_=type_, name=name,
                                                settings=params.get("settings"), config=messenger_config(ctx.settings))
    return channel_configs.create_webchat(
        ctx.uow, ctx.tenant_id, name=name, webhook_url=optional_str(params, "webhook_url", max_len=MAX_URL),
        webhook_secret=optional_str(params, "webhook_secret", max_len=255),
        settings=optional_dict(params, "settings"), allow_private=ctx.settings.allow_private_urls)


def update(ctx, params):
    reject_unknown(params, {"config_id", "name", "webhook_url", "webhook_secret", "enabled", "settings"})
    config_id = require_int(params, "config_id")
    type_ = channel_configs.get(ctx.uow, ctx.tenant_id, config_id).type
    name = optional_str(params, "name", max_len=channel_configs.MAX_NAME)
    if type_ in MESSENGERS:
        _refuse_webchat_params(params, type_)
        return channel_configs.update_messenger(ctx.uow, ctx.tenant_id, config_id, name=name, enabled=_enabled(params),
                                                settings=params.get("settings"), config=messenger_config(ctx.settings))
    if params.get("settings"):
        raise InvalidParamsError("A webchat channel takes no settings.", data={"param": "settings"})
    changes = {}
    if "webhook_secret" in params:  # null removes the secret; leaving it out keeps it
        changes["webhook_secret"] = optional_str(params, "webhook_secret", max_len=255)
    return channel_configs.update_webchat(
        ctx.uow, ctx.tenant_id, config_id, allow_private=ctx.settings.allow_private_urls, name=name,
        webhook_url=optional_str(params, "webhook_url", max_len=MAX_URL), enabled=_enabled(params), **changes)


def get(ctx, params):
    reject_unknown(params, {"config_id"})
    return channel_configs.summary(channel_configs.get(ctx.uow, ctx.tenant_id, require_int(params, "config_id")))


def list_(ctx, params):
    reject_unknown(params, {"type", "page", "per_page"})
    page, per_page = page_params(params)
    return channel_configs.list_channels(ctx.uow, ctx.tenant_id, type_=optional_one_of(params, "type", channel_configs.TYPES),
                                         page=page, per_page=per_page)


def delete(ctx, params):
    reject_unknown(params, {"config_id"})
    config_id = require_int(params, "config_id")
    if channel_configs.get(ctx.uow, ctx.tenant_id, config_id).type in MESSENGERS:
        return channel_configs.delete_messenger(ctx.uow, ctx.tenant_id, config_id, messenger_config(ctx.settings))
    channel_configs.delete_channel(ctx.uow, ctx.tenant_id, config_id)
    return {"config_id": config_id, "deleted": True}


METHODS = (
    RpcMethod("channel.create", create, "admin"),
    RpcMethod("channel.update", update, "admin"),
    RpcMethod("channel.get", get, "admin"),
    RpcMethod("channel.list", list_, "admin"),
    RpcMethod("channel.delete", delete, "admin"),
)
