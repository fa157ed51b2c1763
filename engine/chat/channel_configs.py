"""Channel configurations (the `channel.*` methods): create, update, list, delete; which definition a channel starts.

Only ``webchat`` can be created today (telegram, whatsapp and viber are refused as not supported
yet). A web-chat channel needs the caller's ``webhook_url`` (every answer is POSTed there) and may
have a ``webhook_secret`` (outgoing requests are then signed); the secret is never returned, only
``has_secret``. The URL is checked with the outbound SSRF guard's rules when it is saved.

A start event names its channel by config id or by name; deploy resolves it to the config id
(``resolve_start_channels``), so renaming a channel keeps its processes bound to it.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError

from engine.errors import BpmnValidationError, ConflictError, InvalidParamsError, NotFoundError
from engine.outbound import OutboundHttp
from engine.store.db import db, is_postgres, iso
from engine.store.models import Channel, Conversation, Definition, Delivery, Message
from engine.store.paging import page_of

TYPES = ("webchat", "telegram", "whatsapp", "viber")
SUPPORTED_TYPES = ("webchat",)
MAX_NAME = 200
SECRET_LENGTH = (16, 255)


def _invalid(name: str, message: str) -> InvalidParamsError:
    return InvalidParamsError(message, data={"param": name})


def _summary(channel: Channel) -> dict[str, Any]:
    return {"config_id": channel.id, "type": channel.type, "name": channel.name,
            "webhook_url": channel.webhook_url, "has_secret": channel.webhook_secret is not None,
            "enabled": channel.enabled, "created_at": iso(channel.created_at)}


def _check_name(name: str) -> str:
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


def create(tenant_id: int, *, type_: str, name: str, webhook_url: str | None, webhook_secret: str | None,
           settings: dict[str, Any] | None, allow_private: bool) -> dict[str, Any]:
    if type_ not in SUPPORTED_TYPES:
        raise _invalid("type", f"Channel type '{type_}' is not supported yet.")
    if settings:
        raise _invalid("settings", "A webchat channel takes no settings.")
    if webhook_url is None:
        raise _invalid("webhook_url", "Missing required parameter 'webhook_url': a webchat channel "
                                      "POSTs every answer there.")
    channel = Channel(tenant_id=tenant_id, type=type_, name=_check_name(name),
                      webhook_url=_check_url(webhook_url, allow_private),
                      webhook_secret=_check_secret(webhook_secret), settings={}, enabled=True)
    db.session.add(channel)
    _commit_unique_name(channel.name)
    return _summary(channel)


def _commit_unique_name(name: str) -> None:
    try:
        db.session.commit()
    except IntegrityError:  # (tenant_id, name) is unique
        db.session.rollback()
        raise ConflictError(f"A channel named '{name}' already exists.") from None


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
    """Change what is given; ``webhook_secret=None`` removes the secret, leaving it out keeps it."""
    channel = get(tenant_id, config_id)
    if name is not None:
        channel.name = _check_name(name)
    if webhook_url is not None:
        channel.webhook_url = _check_url(webhook_url, allow_private)
    if webhook_secret is not _UNSET:
        channel.webhook_secret = _check_secret(webhook_secret)
    if enabled is not None:
        channel.enabled = enabled
    _commit_unique_name(channel.name)
    return _summary(channel)


def list_channels(tenant_id: int, *, type_: str | None, page: int, per_page: int) -> dict[str, Any]:
    conditions = [Channel.tenant_id == tenant_id]
    if type_ is not None:
        conditions.append(Channel.type == type_)
    return page_of(select(Channel).where(*conditions), Channel.id, page=page, per_page=per_page,
                   scalars=True, item=_summary)


def delete_channel(tenant_id: int, config_id: int) -> dict[str, Any]:
    """Delete a channel with its closed conversations and their messages.

    Refused (``conflict``) while a conversation is active: its instance would lose its customer.
    Deliveries already queued still go out (they carry their URL); they only forget the channel.
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
    of_channel = select(Conversation.id).where(Conversation.channel_id == channel.id)
    db.session.execute(delete(Message).where(Message.conversation_id.in_(of_channel)))
    db.session.execute(delete(Conversation).where(Conversation.channel_id == channel.id))
    db.session.execute(update(Delivery).where(Delivery.channel_id == channel.id).values(channel_id=None))
    db.session.execute(delete(Channel).where(Channel.id == channel.id))
    db.session.commit()
    return {"config_id": config_id, "deleted": True}


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


def bound_start_event(definition: Definition, channel: Channel) -> str | None:
    """The start event of ``definition`` that a message on ``channel`` begins at."""
    return next((start["element_id"] for start in definition.start_events or []
                 if start.get("trigger") == channel.type and start.get("config_id") == channel.id), None)


def bound_definition(channel: Channel) -> Definition | None:
    """The definition a message on ``channel`` starts: of the latest version of every code, the one
    deployed last whose start event is bound to this channel.

    A code whose latest version no longer names the channel does not listen to it any more (as a
    webhook's code starts only its latest version). On SQLite, which reuses the id of a deleted
    last row, a definition deployed before the channel existed was bound to the deleted one
    (PostgreSQL never reuses ids, and its web processes may run on machines whose clocks differ).
    """
    reused_ids = not is_postgres()
    latest = (select(func.max(Definition.id)).where(Definition.tenant_id == channel.tenant_id)
              .group_by(Definition.code))
    rows = db.session.execute(
        select(Definition.id, Definition.start_events, Definition.created_at)
        .where(Definition.id.in_(latest)).order_by(Definition.id.desc())).all()
    for row in rows:
        if (not reused_ids or row.created_at >= channel.created_at) and any(
                start.get("trigger") == channel.type and start.get("config_id") == channel.id
                for start in row.start_events or []):
            return db.session.get(Definition, row.id)
    return None
