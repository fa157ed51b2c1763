"""Customers a messenger says cannot be reached (blocked the bot, unsubscribed): deliveries to them
are dead at once with that reason instead of being tried for 24 hours, until they come back."""
from __future__ import annotations

from sqlalchemy import bindparam, delete, select

from engine.store.db import utcnow
from engine.store.models import UnreachableChat
from engine.store.unit_of_work import UnitOfWork


def mark(uow: UnitOfWork, tenant_id: int, channel_id: int, chat_id: str, reason: str) -> None:
    """In the caller's transaction: the chat cannot be reached any more, for ``reason``."""
    row = uow.execute(select(UnreachableChat).where(
        UnreachableChat.channel_id == channel_id, UnreachableChat.chat_id == chat_id)).scalar_one_or_none()
    if row is None:
        uow.session.add(UnreachableChat(tenant_id=tenant_id, channel_id=channel_id, chat_id=chat_id,
                                       reason=reason, since=utcnow()))
    else:
        row.reason, row.since = reason, utcnow()
    uow.session.flush()


# Both run for every messenger message (clear as it comes in, reason_for as its answer goes out).
_THIS_CHAT = (UnreachableChat.channel_id == bindparam("channel_id"), UnreachableChat.chat_id == bindparam("chat_id"))
_CLEAR = delete(UnreachableChat).where(*_THIS_CHAT)
_REASON = select(UnreachableChat.reason).where(*_THIS_CHAT)


def clear(uow: UnitOfWork, channel_id: int, chat_id: str) -> None:
    """In the caller's transaction: the customer came back (unblocked, subscribed, wrote again)."""
    uow.run(_CLEAR, {"channel_id": channel_id, "chat_id": chat_id})


def reason_for(uow: UnitOfWork, channel_id: int, chat_id: str) -> str | None:
    """Why the chat cannot be reached, or None when it can."""
    return uow.run(_REASON, {"channel_id": channel_id,
                                                     "chat_id": chat_id}).scalar_one_or_none()
