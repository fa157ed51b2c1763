"""Channel configurations (the ``channel.*`` methods) of every type: creating, changing and deleting
them, how a channel is shown, and which definition a channel starts.

A web-chat channel needs the caller's ``webhook_url`` (every answer is POSTed there) and may
have a ``webhook_secret`` (outgoing requests are then signed); the secret is never returned, only
``has_secret``. The URL is checked with the outbound SSRF guard's rules when it is saved.

A messenger channel (Telegram, Viber, WhatsApp: its ``Messenger`` in ``MessengerConfig.messengers``)
is connected to its messenger BEFORE anything is stored, and with no transaction open: creating
checks the credentials and registers Baton's webhook (Telegram ``getMe`` + ``setWebhook`` with a new
secret token, Viber ``get_account_info`` + ``set_webhook``, WhatsApp ``GET /<phone_number_id>``;
Meta's webhook is set in its dashboard). A refusal is ``invalid_params`` quoting the messenger, a
messenger out of reach ``messenger_unavailable``; either way nothing is stored. No transaction is
open meanwhile: on SQLite one holds the database's write lock, and Viber calls Baton's inbound
endpoint while ``set_webhook`` runs. It is shown with its non-secret settings, the bot the
credentials belong to, the webhook URL registered and the last registration or delivery error,
never a credential.

A bot has one webhook. A channel therefore unregisters (on disable, a new bot, delete) only a
webhook that is still its own: each registered URL names its channel (``?channel=<key>``), and the
messenger is asked which URL it calls now. Another channel registering the same bot (any tenant)
takes its updates over; the first one no longer receives any, and never the other's.

A start event names its channel by config id or by name; deploy resolves it to the config id
(``resolve_start_channels``), so renaming a channel keeps its processes bound to it.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.exc import IntegrityError

from engine.chat.messengers.connection import Connection, require_public_https
from engine.chat.messengers.protocol import Messenger
from engine.chat.messengers.registry import MESSENGERS, Registry
from engine.errors import (BpmnValidationError, ConflictError, InvalidParamsError, MessengerUnavailableError,
                           NotFoundError)
from engine.outbound import OutboundHttp
from engine.store.db import iso, utcnow
from engine.store.models import (Channel, ChatAttachment, Conversation, Definition, Delivery, InboundReceipt, Message,
                                 UnreachableChat)
from engine.store.paging import page_of
from engine.store.unit_of_work import Then, UnitOfWork

TYPES = ("webchat", *MESSENGERS)
MAX_NAME = 200
SECRET_LENGTH = (16, 255)
TIMEOUT_S = 10.0   # per call to a messenger while the caller waits


@dataclass(frozen=True)
class MessengerConfig:
    """What talking to the messengers needs: the messengers by type, and from the configuration."""

    messengers: Registry
    public_url: str | None
    allow_private: bool
    api_urls: Mapping[str, str]

    def http(self) -> OutboundHttp:
        return OutboundHttp(allow_private=self.allow_private, timeout_s=TIMEOUT_S)


def _invalid(name: str, message: str) -> InvalidParamsError:
    return InvalidParamsError(message, data={"param": name})


def summary(channel: Channel, messengers: Registry = MESSENGERS) -> dict[str, Any]:
    """A channel as every ``channel.*`` method shows it; never a secret."""
    messenger = messengers.get(channel.type)
    if messenger is not None:
        return _messenger_summary(channel, messenger)
    return {"config_id": channel.id, "type": channel.type, "name": channel.name,
            "webhook_url": channel.webhook_url, "has_secret": channel.webhook_secret is not None,
            "enabled": channel.enabled, "created_at": iso(channel.created_at)}


def _messenger_summary(channel: Channel, messenger: Messenger) -> dict[str, Any]:
    connection = dict(channel.connection or {})
    return {"config_id": channel.id, "type": channel.type, "name": channel.name, "enabled": channel.enabled,
            "created_at": iso(channel.created_at), "webhook_url": channel.webhook_url,
            "settings": messenger.settings_spec.shown(channel.settings or {}),
            "bot_id": connection.pop("bot_id", None), "bot_name": connection.pop("bot_name", None),
            **connection, "registered_at": iso(channel.registered_at),
            "last_error": channel.last_error, "last_error_at": iso(channel.last_error_at)}


def check_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise _invalid("name", "Parameter 'name' must not be empty.")
    if name.isdigit():  # a start event's `channel` of digits means a config id
        raise _invalid("name", "Parameter 'name' must not be digits only (that reads as a config id).")
    return name


def refuse_taken_name(uow: UnitOfWork, tenant_id: int, name: str, except_id: int | None = None) -> None:
    """Before calling a messenger: a name already taken is refused now, not after registering."""
    query = select(Channel.id).where(Channel.tenant_id == tenant_id, Channel.name == name)
    if except_id is not None:
        query = query.where(Channel.id != except_id)
    if uow.execute(query).first() is not None:
        raise ConflictError(f"A channel named '{name}' already exists.")


def get(uow: UnitOfWork, tenant_id: int, config_id: int) -> Channel:
    channel = uow.execute(select(Channel).where(
        Channel.tenant_id == tenant_id, Channel.id == config_id)).scalar_one_or_none()
    if channel is None:
        raise NotFoundError(f"Channel {config_id} not found.")
    return channel


# --- web-chat channels ---------------------------------------------------------------------------

def _check_url(url: str, allow_private: bool) -> str:
    with OutboundHttp(allow_private=allow_private) as outbound:
        outbound.check_url(url)
    return url


def _check_secret(secret: str | None) -> str | None:
    low, high = SECRET_LENGTH
    if secret is not None and not low <= len(secret) <= high:
        raise _invalid("webhook_secret", f"Parameter 'webhook_secret' must be {low} to {high} characters, "
                                         "or null for none.")
    return secret


def create_webchat(uow: UnitOfWork, tenant_id: int, *, name: str, webhook_url: str | None,
                   webhook_secret: str | None, settings: dict[str, Any] | None,
                   allow_private: bool) -> dict[str, Any]:
    """A web-chat channel."""
    if settings:
        raise _invalid("settings", "A webchat channel takes no settings.")
    if webhook_url is None:
        raise _invalid("webhook_url", "Missing required parameter 'webhook_url': a webchat channel "
                                      "POSTs every answer there.")
    channel = Channel(tenant_id=tenant_id, type="webchat", name=check_name(name),
                      webhook_url=_check_url(webhook_url, allow_private),
                      webhook_secret=_check_secret(webhook_secret), settings={}, enabled=True)
    _store(uow, tenant_id, channel, uow.session.add)
    return summary(channel)


_UNSET = object()


def update_webchat(uow: UnitOfWork, tenant_id: int, config_id: int, *, allow_private: bool,
                   name: str | None = None, webhook_url: str | None = None, webhook_secret: Any = _UNSET,
                   enabled: bool | None = None) -> dict[str, Any]:
    """A web-chat channel: change what is given; ``webhook_secret=None`` removes the secret, leaving
    it out keeps it."""
    channel = get(uow, tenant_id, config_id)
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = check_name(name)
    if webhook_url is not None:
        changes["webhook_url"] = _check_url(webhook_url, allow_private)
    if webhook_secret is not _UNSET:
        changes["webhook_secret"] = _check_secret(webhook_secret)
    if enabled is not None:
        changes["enabled"] = enabled
    _store(uow, tenant_id, channel, lambda row: [setattr(row, key, value) for key, value in changes.items()])
    return summary(channel)


# --- messenger channels --------------------------------------------------------------------------

def create_messenger(uow: UnitOfWork, tenant_id: int, *, type_: str, name: str, settings: Any,
                     config: MessengerConfig) -> dict[str, Any]:
    """Connect first (no transaction open meanwhile), then store; if the unit of work does not
    commit (a name taken meanwhile, say), the webhook registered is removed again."""
    messenger = config.messengers[type_]
    checked = messenger.settings_spec.check(settings)
    name = check_name(name)
    require_public_https(messenger.name, config.public_url, config.allow_private)
    refuse_taken_name(uow, tenant_id, name)
    uow.end_read()                              # nothing open while the messenger is asked
    connection = _connect(messenger, checked, config)
    uow.on_rollback(lambda: _unregister(messenger, checked, connection.webhook_url, config))
    channel = Channel(tenant_id=tenant_id, type=type_, name=name, settings=checked, enabled=True,
                      created_at=utcnow())
    _apply(channel, connection)
    _store(uow, tenant_id, channel, uow.session.add, messenger)
    return summary(channel, config.messengers)


def update_messenger(uow: UnitOfWork, tenant_id: int, config_id: int, *, name: str | None, enabled: bool | None,
                     settings: Any, config: MessengerConfig) -> dict[str, Any] | Then:
    """New credentials or enabling connect again (then, once that is stored, the old bot's webhook is
    removed, if still ours); disabling unregisters. A disabled channel's new credentials are checked
    when it is enabled."""
    channel = get(uow, tenant_id, config_id)
    messenger = config.messengers[channel.type]
    old_settings, old_url = dict(channel.settings or {}), channel.webhook_url
    old_bot = (channel.connection or {}).get("bot_id")
    new_settings = old_settings if settings is None else messenger.settings_spec.check(
        {**old_settings, **settings} if isinstance(settings, Mapping) else settings)
    new_name = channel.name if name is None else check_name(name)
    refuse_taken_name(uow, tenant_id, new_name, except_id=config_id)
    was_enabled = channel.enabled
    will_be_enabled = was_enabled if enabled is None else enabled
    changed = new_settings != old_settings
    uow.end_read()                              # nothing open while the messenger is asked

    connection, warning = None, None
    if will_be_enabled and (changed or not was_enabled):
        require_public_https(messenger.name, config.public_url, config.allow_private)
        connection = _connect(messenger, new_settings, config)
        uow.on_rollback(lambda: _unregister(messenger, new_settings, connection.webhook_url, config))
    elif was_enabled and not will_be_enabled:
        warning = _unregister(messenger, old_settings, old_url, config)

    def change(channel: Channel) -> None:
        channel.name, channel.settings, channel.enabled = new_name, new_settings, will_be_enabled
        key = messenger.settings_key(new_settings)
        if connection is not None:
            _apply(channel, connection)
        elif key is not None:                    # a setting is what finds the channel (WhatsApp's number)
            channel.inbound_key = key
        if warning:
            channel.last_error, channel.last_error_at = warning, utcnow()

    channel = get(uow, tenant_id, config_id)
    _store(uow, tenant_id, channel, change, messenger)
    answer = summary(channel, config.messengers)
    if connection is not None and was_enabled and old_bot != connection.bot_id:
        # Once the new bot is stored: the old bot's webhook, if still ours.
        return Then(call=lambda: _unregister(messenger, old_settings, old_url, config),
                    step=lambda uow, later: _warned(uow, config_id, answer, later or warning, later))
    return _warned(uow, config_id, answer, warning, None)


def delete_messenger(uow: UnitOfWork, tenant_id: int, config_id: int,
                     config: MessengerConfig) -> dict[str, Any] | Then:
    """Delete (``delete_channel``'s rules), then, once that is committed, unregister the webhook if it
    is still the channel's; a messenger that cannot be asked leaves a ``warning`` in the answer."""
    gone = delete_channel(uow, tenant_id, config_id)
    answer: dict[str, Any] = {"config_id": config_id, "deleted": True}
    if not gone["enabled"]:
        return answer
    messenger = config.messengers[gone["type"]]
    return Then(call=lambda: _unregister(messenger, gone["settings"], gone["webhook_url"], config),
                step=lambda _uow, warning: {**answer, "warning": warning} if warning else answer)


def _connect(messenger: Messenger, settings: dict[str, str], config: MessengerConfig) -> Connection:
    """Check the credentials and register the webhook; raises (nothing registered) on a refusal."""
    with config.http() as http:
        return messenger.connect(http, settings, config.public_url or "", api_url=config.api_urls[messenger.type])


def _unregister(messenger: Messenger, settings: dict[str, str], registered_url: str | None,
                config: MessengerConfig) -> str | None:
    """Remove the webhook if the messenger still calls ``registered_url``; a warning when it could not."""
    api_url = config.api_urls[messenger.type]
    try:
        with config.http() as http:
            current = messenger.registered_webhook(http, settings, api_url=api_url)
            if current is None or current != registered_url:
                return None                      # not ours (any more): nothing to remove
            messenger.disconnect(http, settings, api_url=api_url)
    except (InvalidParamsError, MessengerUnavailableError) as error:
        return f"The webhook could not be removed from {messenger.name}: {error.message}"
    return None


def _apply(channel: Channel, connection: Connection) -> None:
    channel.inbound_key, channel.webhook_url = connection.inbound_key, connection.webhook_url
    channel.webhook_secret, channel.connection = connection.webhook_secret, connection.identity()
    channel.registered_at = utcnow()


def _store(uow: UnitOfWork, tenant_id: int, channel: Channel, change: Callable[[Channel], Any],
           messenger: Messenger | None = None) -> None:
    """Make ``change`` to the channel (``uow.session.add`` for a new one) and write it, all or
    nothing; a taken name or a key from the settings already taken (a WhatsApp number already
    connected) is a ``conflict`` naming which. (The change is made inside the savepoint: a row
    changed before it would be flushed as it begins, outside it.)"""
    try:
        with uow.savepoint():
            change(channel)
            name = channel.name
            key = messenger.settings_key(channel.settings or {}) if messenger is not None else None
            uow.session.flush()
    except IntegrityError:
        taken = uow.execute(select(Channel.id).where(Channel.tenant_id == tenant_id, Channel.name == name)).first()
        if taken is not None or key is None:
            raise ConflictError(f"A channel named '{name}' already exists.") from None
        raise ConflictError(messenger.key_taken(key)) from None


def _warned(uow: UnitOfWork, config_id: int, answer: dict[str, Any], warning: str | None,
            noted: str | None) -> dict[str, Any]:
    """The answer, with its ``warning``; ``noted``: a warning found after the channel was stored,
    kept as its last error too."""
    if noted:
        channel = uow.session.get(Channel, config_id)
        if channel is not None:
            channel.last_error, channel.last_error_at = noted, utcnow()
    return {**answer, "warning": warning} if warning else answer


# --- every type -------------------------------------------------------------------------------------

def list_channels(uow: UnitOfWork, tenant_id: int, *, type_: str | None, page: int, per_page: int) -> dict[str, Any]:
    conditions = [Channel.tenant_id == tenant_id]
    if type_ is not None:
        conditions.append(Channel.type == type_)
    return page_of(uow, select(Channel).where(*conditions), Channel.id, page=page, per_page=per_page,
                   scalars=True, item=summary)


def delete_channel(uow: UnitOfWork, tenant_id: int, config_id: int) -> dict[str, Any]:
    """Delete a channel with its closed conversations and their messages. Returns what a
    messenger channel needs to unregister afterwards: ``type``, ``settings``, ``webhook_url``, ``enabled``.

    Refused (``conflict``) while a conversation is active: its instance would lose its customer.
    Web-chat deliveries already queued still go out (they carry their URL); they only forget the
    channel. A messenger's cannot (the credentials went with the channel): they are dead when tried.
    """
    channel = uow.execute(select(Channel).where(Channel.tenant_id == tenant_id, Channel.id == config_id)
                                 .with_for_update()).scalar_one_or_none()
    if channel is None:
        raise NotFoundError(f"Channel {config_id} not found.")
    active = uow.execute(select(func.count()).select_from(Conversation).where(
        Conversation.channel_id == channel.id, Conversation.status == "active")).scalar_one()
    if active:
        raise ConflictError(f"Channel {config_id} has {active} active conversation(s); cancel their "
                            "instances or disable the channel (channel.update enabled=false) instead.")
    gone = {"type": channel.type, "settings": dict(channel.settings or {}), "webhook_url": channel.webhook_url,
            "enabled": channel.enabled}
    of_channel = select(Conversation.id).where(Conversation.channel_id == channel.id)
    uow.execute(delete(Message).where(Message.conversation_id.in_(of_channel)))
    uow.execute(delete(ChatAttachment).where(ChatAttachment.channel_id == channel.id))
    uow.execute(delete(Conversation).where(Conversation.channel_id == channel.id))
    uow.execute(update(Delivery).where(Delivery.channel_id == channel.id).values(channel_id=None))
    uow.execute(delete(InboundReceipt).where(InboundReceipt.channel_id == channel.id))
    uow.execute(delete(UnreachableChat).where(UnreachableChat.channel_id == channel.id))
    uow.execute(delete(Channel).where(Channel.id == channel.id))
    return gone


# -- binding processes to channels -----------------------------------------------------------------

def resolve_start_channels(uow: UnitOfWork, tenant_id: int, start_events, channel_triggers) -> dict[str, int]:
    """``{start_event_id: config_id}`` for the start events with a channel trigger.

    ``channel`` is a config id (digits) or a channel name of this tenant, of the trigger's type.
    Raises BpmnValidationError listing every start event whose channel is unknown or of another type.
    """
    bound, errors = {}, []
    for start in start_events:
        if start.trigger not in channel_triggers:
            continue
        channel = _find_by_reference(uow, tenant_id, start.channel or "")
        if channel is None:
            message = (f"Start event '{start.element_id}' is bound to channel '{start.channel}', "
                       "which does not exist for this tenant.")
        elif channel.type != start.trigger:
            message = (f"Start event '{start.element_id}' has trigger '{start.trigger}' but channel "
                       f"'{start.channel}' is a {channel.type} channel.")
        else:
            bound[start.element_id] = channel.id
            continue
        errors.append({"element_id": start.element_id, "line": getattr(start, "line", None), "message": message})
    if errors:
        raise BpmnValidationError(errors)
    return bound


def _find_by_reference(uow: UnitOfWork, tenant_id: int, reference: str) -> Channel | None:
    reference = reference.strip()
    query = select(Channel).where(Channel.tenant_id == tenant_id)
    if reference.isdigit():
        if int(reference) > 2**63 - 1:
            return None
        return uow.execute(query.where(Channel.id == int(reference))).scalar_one_or_none()
    return uow.execute(query.where(Channel.name == reference)).scalar_one_or_none()


def bound_start_event(definition, channel) -> str | None:
    """The start event of ``definition`` that a message on ``channel`` begins at."""
    return next((start["element_id"] for start in definition.start_events or []
                 if start.get("trigger") == channel.type and start.get("config_id") == channel.id), None)


_LATEST_VERSIONS = (  # of every code of a tenant, newest first (built once: read on every new chat)
    select(Definition.id, Definition.start_events, Definition.created_at)
    .where(Definition.id.in_(select(func.max(Definition.id)).where(Definition.tenant_id == bindparam("tenant_id"))
                             .group_by(Definition.code)))
    .order_by(Definition.id.desc()))


def bound_definition(uow: UnitOfWork, channel):
    """The definition a message on ``channel`` starts (its ``id`` and ``start_events``): of the
    latest version of every code, the one deployed last whose start event is bound to this channel.

    A code whose latest version no longer names the channel does not listen to it any more (as a
    webhook's code starts only its latest version). On SQLite, which reuses the id of a deleted
    last row, a definition deployed before the channel existed was bound to the deleted one
    (PostgreSQL never reuses ids, and its web processes may run on machines whose clocks differ).
    """
    reused_ids = not uow.postgres
    rows = uow.run(_LATEST_VERSIONS, {"tenant_id": channel.tenant_id}).all()
    for row in rows:
        if (not reused_ids or row.created_at >= channel.created_at) and any(
                start.get("trigger") == channel.type and start.get("config_id") == channel.id
                for start in row.start_events or []):
            return row
    return None
