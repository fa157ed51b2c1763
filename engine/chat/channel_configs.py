"""Channel configurations (the `channel.*` methods): web-chat's create and update; for every type
get, list and delete, how a channel is shown; which definition a channel starts.

A web-chat channel needs the caller's ``webhook_url`` (every answer is POSTed there) and may
have a ``webhook_secret`` (outgoing requests are then signed); the secret is never returned, only
``has_secret``. The URL is checked with the outbound SSRF guard's rules when it is saved.
Messenger channels connect to their messenger when they are created (``messenger_channels``); they
are shown with their non-secret settings, the bot the credentials belong to, the webhook URL
registered and the last registration or delivery error, never a credential.

A start event names its channel by config id or by name; deploy resolves it to the config id
(``resolve_start_channels``), so renaming a channel keeps its processes bound to it.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.exc import IntegrityError

from engine.chat.messengers import TYPES as MESSENGER_TYPES
from engine.chat.messengers import messenger
from engine.errors import BpmnValidationError, ConflictError, InvalidParamsError, NotFoundError
from engine.outbound import OutboundHttp
from engine.store.db import db, is_postgres, iso
from engine.store.models import (Channel, Conversation, Definition, Delivery, InboundReceipt, Message,
                                 UnreachableChat)
from engine.store.paging import page_of

TYPES = ("webchat", "telegram", "whatsapp", "viber")
MAX_NAME = 200
SECRET_LENGTH = (16, 255)


def _invalid(name: str, message: str) -> InvalidParamsError:
    return InvalidParamsError(message, data={"param": name})


def summary(channel: Channel) -> dict[str, Any]:
    """A channel as every ``channel.*`` method shows it; never a secret."""
    if channel.type in MESSENGER_TYPES:
        return _messenger_summary(channel)
    return {"config_id": channel.id, "type": channel.type, "name": channel.name,
            "webhook_url": channel.webhook_url, "has_secret": channel.webhook_secret is not None,
            "enabled": channel.enabled, "created_at": iso(channel.created_at)}


def _messenger_summary(channel: Channel) -> dict[str, Any]:
    connection = dict(channel.connection or {})
    return {"config_id": channel.id, "type": channel.type, "name": channel.name, "enabled": channel.enabled,
            "created_at": iso(channel.created_at), "webhook_url": channel.webhook_url,
            "settings": messenger(channel.type).SETTINGS.shown(channel.settings or {}),
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


def create(tenant_id: int, *, name: str, webhook_url: str | None, webhook_secret: str | None,
           settings: dict[str, Any] | None, allow_private: bool) -> dict[str, Any]:
    """A web-chat channel."""
    if settings:
        raise _invalid("settings", "A webchat channel takes no settings.")
    if webhook_url is None:
        raise _invalid("webhook_url", "Missing required parameter 'webhook_url': a webchat channel "
                                      "POSTs every answer there.")
    channel = Channel(tenant_id=tenant_id, type="webchat", name=check_name(name),
                      webhook_url=_check_url(webhook_url, allow_private),
                      webhook_secret=_check_secret(webhook_secret), settings={}, enabled=True)
    db.session.add(channel)
    commit_unique_name(channel.name)
    return summary(channel)


def commit_unique_name(name: str) -> None:
    try:
        db.session.commit()
    except IntegrityError:  # (tenant_id, name) is unique
        db.session.rollback()
        raise ConflictError(f"A channel named '{name}' already exists.") from None


def refuse_taken_name(tenant_id: int, name: str, except_id: int | None = None) -> None:
    """Before calling a messenger: a name already taken is refused now, not after registering."""
    query = select(Channel.id).where(Channel.tenant_id == tenant_id, Channel.name == name)
    if except_id is not None:
        query = query.where(Channel.id != except_id)
    if db.session.execute(query).first() is not None:
        raise ConflictError(f"A channel named '{name}' already exists.")


def get(tenant_id: int, config_id: int) -> Channel:
    channel = db.session.execute(select(Channel).where(
        Channel.tenant_id == tenant_id, Channel.id == config_id)).scalar_one_or_none()
    if channel is None:
        raise NotFoundError(f"Channel {config_id} not found.")
    return channel


_UNSET = object()


def update_channel(tenant_id: int, config_id: int, *, allow_private: bool, name: str | None = None,
                   webhook_url: str | None = None, webhook_secret: Any = _UNSET,
                   enabled: bool | None = None) -> dict[str, Any]:
    """A web-chat channel: change what is given; ``webhook_secret=None`` removes the secret, leaving
    it out keeps it."""
    channel = get(tenant_id, config_id)
    if name is not None:
        channel.name = check_name(name)
    if webhook_url is not None:
        channel.webhook_url = _check_url(webhook_url, allow_private)
    if webhook_secret is not _UNSET:
        channel.webhook_secret = _check_secret(webhook_secret)
    if enabled is not None:
        channel.enabled = enabled
    commit_unique_name(channel.name)
    return summary(channel)


def list_channels(tenant_id: int, *, type_: str | None, page: int, per_page: int) -> dict[str, Any]:
    conditions = [Channel.tenant_id == tenant_id]
    if type_ is not None:
        conditions.append(Channel.type == type_)
    return page_of(select(Channel).where(*conditions), Channel.id, page=page, per_page=per_page,
                   scalars=True, item=summary)


def delete_channel(tenant_id: int, config_id: int) -> dict[str, Any]:
    """Delete a channel with its closed conversations and their messages; commits. Returns what a
    messenger channel needs to unregister afterwards: ``type``, ``settings``, ``webhook_url``, ``enabled``.

    Refused (``conflict``) while a conversation is active: its instance would lose its customer.
    Web-chat deliveries already queued still go out (they carry their URL); they only forget the
    channel. A messenger's cannot (the credentials went with the channel): they are dead when tried.
    """
    channel = db.session.execute(select(Channel).where(Channel.tenant_id == tenant_id, Channel.id == config_id)
                                 .with_for_update()).scalar_one_or_none()
    if channel is None:
        raise NotFoundError(f"Channel {config_id} not found.")
    active = db.session.execute(select(func.count()).select_from(Conversation).where(
        Conversation.channel_id == channel.id, Conversation.status == "active")).scalar_one()
    if active:
        raise ConflictError(f"Channel {config_id} has {active} active conversation(s); cancel their "
                            "instances or disable the channel (channel.update enabled=false) instead.")
    gone = {"type": channel.type, "settings": dict(channel.settings or {}), "webhook_url": channel.webhook_url,
            "enabled": channel.enabled}
    of_channel = select(Conversation.id).where(Conversation.channel_id == channel.id)
    db.session.execute(delete(Message).where(Message.conversation_id.in_(of_channel)))
    db.session.execute(delete(Conversation).where(Conversation.channel_id == channel.id))
    db.session.execute(update(Delivery).where(Delivery.channel_id == channel.id).values(channel_id=None))
    db.session.execute(delete(InboundReceipt).where(InboundReceipt.channel_id == channel.id))
    db.session.execute(delete(UnreachableChat).where(UnreachableChat.channel_id == channel.id))
    db.session.execute(delete(Channel).where(Channel.id == channel.id))
    db.session.commit()
    return gone


# -- binding processes to channels -----------------------------------------------------------------

def resolve_start_channels(tenant_id: int, start_events, channel_triggers) -> dict[str, int]:
    """``{start_event_id: config_id}`` for the start events with a channel trigger.

    ``channel`` is a config id (digits) or a channel name of this tenant, of the trigger's type.
    Raises BpmnValidationError listing every start event whose channel is unknown or of another type.
    """
    bound, errors = {}, []
    for start in start_events:
        if start.trigger not in channel_triggers:
            continue
        channel = _find_by_reference(tenant_id, start.channel or "")
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


def _find_by_reference(tenant_id: int, reference: str) -> Channel | None:
    reference = reference.strip()
    query = select(Channel).where(Channel.tenant_id == tenant_id)
    if reference.isdigit():
        if int(reference) > 2**63 - 1:
            return None
        return db.session.execute(query.where(Channel.id == int(reference))).scalar_one_or_none()
    return db.session.execute(query.where(Channel.name == reference)).scalar_one_or_none()


def bound_start_event(definition, channel) -> str | None:
    """The start event of ``definition`` that a message on ``channel`` begins at."""
    return next((start["element_id"] for start in definition.start_events or []
                 if start.get("trigger") == channel.type and start.get("config_id") == channel.id), None)


_LATEST_VERSIONS = (  # of every code of a tenant, newest first (built once: read on every new chat)
    select(Definition.id, Definition.start_events, Definition.created_at)
    .where(Definition.id.in_(select(func.max(Definition.id)).where(Definition.tenant_id == bindparam("tenant_id"))
                             .group_by(Definition.code)))
    .order_by(Definition.id.desc()))


def bound_definition(channel):
    """The definition a message on ``channel`` starts (its ``id`` and ``start_events``): of the
    latest version of every code, the one deployed last whose start event is bound to this channel.

    A code whose latest version no longer names the channel does not listen to it any more (as a
    webhook's code starts only its latest version). On SQLite, which reuses the id of a deleted
    last row, a definition deployed before the channel existed was bound to the deleted one
    (PostgreSQL never reuses ids, and its web processes may run on machines whose clocks differ).
    """
    reused_ids = not is_postgres()
    rows = db.session.connection().execute(_LATEST_VERSIONS, {"tenant_id": channel.tenant_id}).all()
    for row in rows:
        if (not reused_ids or row.created_at >= channel.created_at) and any(
                start.get("trigger") == channel.type and start.get("config_id") == channel.id
                for start in row.start_events or []):
            return row
    return None
