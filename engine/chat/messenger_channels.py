"""Messenger channels' lifecycle (``channel.create`` / ``update`` / ``delete`` of Telegram, Viber and
WhatsApp): the messenger is asked BEFORE anything is stored, and with no transaction open.

Creating checks the credentials and registers Baton's webhook (Telegram ``getMe`` + ``setWebhook``
with a new secret token, Viber ``get_account_info`` + ``set_webhook``, WhatsApp ``GET
/<phone_number_id>``; Meta's webhook is set in its dashboard). A refusal is ``invalid_params``
quoting the messenger, a messenger out of reach ``messenger_unavailable``; either way nothing is
stored. No transaction is open meanwhile: on SQLite one holds the database's write lock, and Viber
calls Baton's inbound endpoint while ``set_webhook`` runs.

A bot has one webhook. A channel therefore unregisters (on disable, a new bot, delete) only a
webhook that is still its own: each registered URL names its channel (``?channel=<key>``), and the
messenger is asked which URL it calls now. Another channel registering the same bot (any tenant)
takes its updates over; the first one no longer receives any, and never the other's.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from engine.chat import channel_configs
from engine.chat.messengers import messenger, telegram, viber, whatsapp
from engine.chat.messengers.connection import require_public_https, webhook_url
from engine.errors import ConflictError, InvalidParamsError, MessengerUnavailableError
from engine.outbound import OutboundHttp
from engine.store.db import db, utcnow
from engine.store.models import Channel

TIMEOUT_S = 10.0   # per call to the messenger while the caller waits


@dataclass(frozen=True)
class MessengerConfig:
    """What talking to the messengers needs from the configuration."""

    public_url: str | None
    allow_private: bool
    api_urls: Mapping[str, str]

    def http(self) -> OutboundHttp:
        return OutboundHttp(allow_private=self.allow_private, timeout_s=TIMEOUT_S)


@dataclass(frozen=True)
class _Registration:
    """What registering gives a channel to keep."""

    inbound_key: str
    webhook_url: str
    webhook_secret: str | None
    connection: dict[str, Any]


def create(tenant_id: int, *, type_: str, name: str, settings: Any, config: MessengerConfig) -> dict[str, Any]:
    module = messenger(type_)
    checked = module.SETTINGS.check(settings)
    name = channel_configs.check_name(name)
    require_public_https(module.NAME, config.public_url, config.allow_private)
    channel_configs.refuse_taken_name(tenant_id, name)
    db.session.rollback()                       # nothing open while the messenger is asked
    registration = _register(type_, checked, config)
    channel = Channel(tenant_id=tenant_id, type=type_, name=name, settings=checked, enabled=True,
                      created_at=utcnow())
    _apply(channel, registration)
    db.session.add(channel)
    try:
        _commit(tenant_id, channel)
    except ConflictError:
        _unregister(type_, checked, registration.webhook_url, config)
        raise
    return channel_configs.summary(channel)


def update(tenant_id: int, config_id: int, *, name: str | None, enabled: bool | None, settings: Any,
           config: MessengerConfig) -> dict[str, Any]:
    """New credentials or enabling register again (then the old bot's webhook is removed, if still
    ours); disabling unregisters. A disabled channel's new credentials are checked when it is enabled."""
    channel = channel_configs.get(tenant_id, config_id)
    type_, module = channel.type, messenger(channel.type)
    old_settings, old_url = dict(channel.settings or {}), channel.webhook_url
    old_bot = (channel.connection or {}).get("bot_id")
    new_settings = old_settings if settings is None else module.SETTINGS.check(
        {**old_settings, **settings} if isinstance(settings, Mapping) else settings)
    new_name = channel.name if name is None else channel_configs.check_name(name)
    channel_configs.refuse_taken_name(tenant_id, new_name, except_id=config_id)
    was_enabled = channel.enabled
    will_be_enabled = was_enabled if enabled is None else enabled
    changed = new_settings != old_settings
    db.session.rollback()

    registration, warning = None, None
    if will_be_enabled and (changed or not was_enabled):
        require_public_https(module.NAME, config.public_url, config.allow_private)
        registration = _register(type_, new_settings, config)
    elif was_enabled and not will_be_enabled:
        warning = _unregister(type_, old_settings, old_url, config)

    channel = channel_configs.get(tenant_id, config_id)
    channel.name, channel.settings, channel.enabled = new_name, new_settings, will_be_enabled
    if registration is not None:
        _apply(channel, registration)
    elif type_ == "whatsapp":                    # the number is what finds a WhatsApp channel
        channel.inbound_key = new_settings["phone_number_id"]
    if warning:
        channel.last_error, channel.last_error_at = warning, utcnow()
    try:
        _commit(tenant_id, channel)
    except ConflictError:
        if registration is not None:
            _unregister(type_, new_settings, registration.webhook_url, config)
        raise
    answer = channel_configs.summary(channel)
    if registration is not None and was_enabled and old_bot != registration.connection.get("bot_id"):
        warning = _unregister(type_, old_settings, old_url, config)   # the old bot's webhook, if still ours
        if warning:
            _note(config_id, warning)
    if warning:
        answer["warning"] = warning
    return answer


def delete(tenant_id: int, config_id: int, config: MessengerConfig) -> dict[str, Any]:
    """Delete (``channel_configs.delete_channel``'s rules), then unregister the webhook if it is still
    the channel's; a messenger that cannot be asked leaves a ``warning`` in the answer."""
    gone = channel_configs.delete_channel(tenant_id, config_id)
    answer: dict[str, Any] = {"config_id": config_id, "deleted": True}
    if gone["enabled"]:
        warning = _unregister(gone["type"], gone["settings"], gone["webhook_url"], config)
        if warning:
            answer["warning"] = warning
    return answer


# --- talking to the messenger -----------------------------------------------------------------------

def _register(type_: str, settings: dict[str, str], config: MessengerConfig) -> _Registration:
    """Check the credentials and register the webhook; raises (nothing registered) on a refusal."""
    api_url, public = config.api_urls[type_], config.public_url or ""
    with config.http() as http:
        if type_ == "telegram":
            secret = telegram.new_secret_token()
            key = secret.partition("_")[0]
            url = webhook_url(public, telegram.WEBHOOK_PATH, channel=key)
            connection = telegram.connect(http, settings, url, api_url=api_url, secret_token=secret)
        elif type_ == "viber":
            key = viber.new_channel_key()
            url = webhook_url(public, viber.WEBHOOK_PATH, **{viber.CHANNEL_QUERY: key})
            connection = viber.connect(http, settings, url, api_url=api_url)
        else:
            key, url = settings["phone_number_id"], webhook_url(public, whatsapp.WEBHOOK_PATH)
            connection = whatsapp.connect(http, settings, url, api_url=api_url)
    shown = {"bot_id": connection.bot_id, "bot_name": connection.bot_name, **connection.details}
    return _Registration(key, url, connection.webhook_secret, shown)


def _unregister(type_: str, settings: dict[str, str], registered_url: str | None,
                config: MessengerConfig) -> str | None:
    """Remove the webhook if the messenger still calls ``registered_url``; a warning when it could not."""
    module = messenger(type_)
    try:
        with config.http() as http:
            current = module.registered_webhook(http, settings, api_url=config.api_urls[type_])
            if current is None or current != registered_url:
                return None                      # not ours (any more): nothing to remove
            module.disconnect(http, settings, api_url=config.api_urls[type_])
    except (InvalidParamsError, MessengerUnavailableError) as error:
        return f"The webhook could not be removed from {module.NAME}: {error.message}"
    return None


# --- storing ----------------------------------------------------------------------------------------

def _apply(channel: Channel, registration: _Registration) -> None:
    channel.inbound_key, channel.webhook_url = registration.inbound_key, registration.webhook_url
    channel.webhook_secret, channel.connection = registration.webhook_secret, registration.connection
    channel.registered_at = utcnow()


def _commit(tenant_id: int, channel: Channel) -> None:
    """Commit; a taken name or a WhatsApp number already connected is a ``conflict`` naming which."""
    name, number = channel.name, channel.inbound_key if channel.type == "whatsapp" else None
    try:
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        taken = db.session.execute(select(Channel.id).where(Channel.tenant_id == tenant_id,
                                                            Channel.name == name)).first()
        if taken is not None or number is None:
            raise ConflictError(f"A channel named '{name}' already exists.") from None
        raise ConflictError(f"The WhatsApp number {number} is already connected to another channel: Meta "
                            "sends a number's messages to one webhook, so it can belong to one channel.") from None


def _note(config_id: int, warning: str) -> None:
    channel = db.session.get(Channel, config_id)
    if channel is not None:
        channel.last_error, channel.last_error_at = warning, utcnow()
        db.session.commit()
