"""channel.* methods (permission ``admin``): web-chat and messenger channels. Secrets are never returned.

A web-chat channel is configured with the caller's ``webhook_url`` / ``webhook_secret``; a messenger
channel with its ``settings`` (INTERFACE §4.4), and creating or re-enabling it connects to the
messenger (``engine.chat.channel_configs``).
"""
from __future__ import annotations

from engine.chat import channel_configs
from engine.chat.messengers.registry import MESSENGERS
from engine.errors import InvalidParamsError
from rpc.registry import Audit, RpcMethod
from rpc.schema import (BOOL, ID, INT, PAGING, TEXT, TIME, Choice, Flag, JsonObject, Param, Text, nullable,
                        obj, one_of, page_of)

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


def create(ctx, params):
    type_, name = params["type"], params["name"]
    if type_ in MESSENGERS:
        _refuse_webchat_params(params, type_)
        return channel_configs.create_messenger(ctx.uow, ctx.tenant_id, type_=type_, name=name,
                                                settings=params.get("settings"), config=messenger_config(ctx.settings))
    return channel_configs.create_webchat(
        ctx.uow, ctx.tenant_id, name=name, webhook_url=params.get("webhook_url"),
        webhook_secret=params.get("webhook_secret"), settings=params.get("settings"),
        allow_private=ctx.settings.allow_private_urls)


def update(ctx, params):
    config_id = params["config_id"]
    type_ = channel_configs.get(ctx.uow, ctx.tenant_id, config_id).type
    if type_ in MESSENGERS:
        _refuse_webchat_params(params, type_)
        return channel_configs.update_messenger(ctx.uow, ctx.tenant_id, config_id, name=params.get("name"),
                                                enabled=params.get("enabled"), settings=params.get("settings"),
                                                config=messenger_config(ctx.settings))
    if params.get("settings"):
        raise InvalidParamsError("A webchat channel takes no settings.", data={"param": "settings"})
    changes = {}
    if "webhook_secret" in params:  # null removes the secret; leaving it out keeps it
        changes["webhook_secret"] = params["webhook_secret"]
    return channel_configs.update_webchat(
        ctx.uow, ctx.tenant_id, config_id, allow_private=ctx.settings.allow_private_urls, name=params.get("name"),
        webhook_url=params.get("webhook_url"), enabled=params.get("enabled"), **changes)


def get(ctx, params):
    return channel_configs.summary(channel_configs.get(ctx.uow, ctx.tenant_id, params["config_id"]))


def list_(ctx, params):
    return channel_configs.list_channels(ctx.uow, ctx.tenant_id, type_=params.get("type"), page=params["page"],
                                         per_page=params["per_page"])


def delete(ctx, params):
    config_id = params["config_id"]
    if channel_configs.get(ctx.uow, ctx.tenant_id, config_id).type in MESSENGERS:
        return channel_configs.delete_messenger(ctx.uow, ctx.tenant_id, config_id, messenger_config(ctx.settings))
    channel_configs.delete_channel(ctx.uow, ctx.tenant_id, config_id)
    return {"config_id": config_id, "deleted": True}


CONFIG = Param("config_id", ID, required=True)
NAME = Text(max_len=channel_configs.MAX_NAME)
WEBHOOK_URL = Param("webhook_url", Text(max_len=MAX_URL), description="webchat: where every answer is POSTed")
SETTINGS = Param("settings", JsonObject(), description="a messenger's settings (docs/api.md, channel.create)")
# A channel as channel.get shows it; a messenger channel adds its bot's names, settings and last error.
CHANNEL = obj(config_id=INT, type=one_of(*channel_configs.TYPES), name=TEXT, enabled=BOOL, created_at=TIME,
              webhook_url=nullable(TEXT))
CHANGED = {**CHANNEL, "properties": {**CHANNEL["properties"], "warning": TEXT}}

METHODS = (
    RpcMethod("channel.create", create, "admin", summary="Create a web-chat channel, or connect a messenger bot.",
              params=(Param("type", Choice(channel_configs.TYPES), required=True),
                      Param("name", NAME, required=True), WEBHOOK_URL,
                      Param("webhook_secret", Text(max_len=255), description="webchat: signs every outgoing request"),
                      SETTINGS),
              result=CHANNEL,
              audit=Audit("channel", answer="config_id")),
    RpcMethod("channel.update", update, "admin", summary="Rename, enable or disable a channel, or change its settings.",
              params=(CONFIG, Param("name", NAME), WEBHOOK_URL,
                      Param("webhook_secret", Text(max_len=255), nullable=True,
                            description="webchat: null removes it; leaving it out keeps it"),
                      Param("enabled", Flag()), SETTINGS),
              result=CHANGED,
              audit=Audit("channel", param="config_id")),
    RpcMethod("channel.get", get, "admin", summary="One channel (never a secret).", params=(CONFIG,), result=CHANNEL),
    RpcMethod("channel.list", list_, "admin", summary="The tenant's channels.",
              params=(Param("type", Choice(channel_configs.TYPES)), *PAGING), result=page_of(CHANNEL)),
    RpcMethod("channel.delete", delete, "admin", summary="Delete a channel with no active conversation.",
              params=(CONFIG,), result=obj(config_id=INT, deleted=BOOL),
              audit=Audit("channel", param="config_id")),
)
