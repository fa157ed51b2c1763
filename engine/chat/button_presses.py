"""Which pressed buttons a conversation takes (Telegram's inline buttons stay on old messages): a
press on the keyboard of the conversation's latest message with buttons, before the customer
answered it in any way. Any other press (an earlier message's keyboard, a keyboard already answered,
a chat whose conversation has ended, a message Telegram no longer sends along) changes nothing and is
answered with a polite notice, so it never reaches whatever the process waits for now."""
from __future__ import annotations

from sqlalchemy import select

from engine.store.models import Conversation, Delivery, Message
from engine.store.unit_of_work import UnitOfWork

OLD_BUTTON = "This choice is no longer available: please use the latest message."
ENDED = "This conversation has ended; write to start a new one."
_RECENT = 20          # outgoing messages looked at for the latest keyboard


def refusal(uow: UnitOfWork, channel_id: int, chat_id: str, pressed_on: str | None) -> str | None:
    """None when the press is on the current keyboard of the chat's active conversation; else the
    notice to answer it with."""
    conversation_id = uow.execute(select(Conversation.id).where(
        Conversation.channel_id == channel_id, Conversation.chat_id == chat_id,
        Conversation.status == "active")).scalar()
    if conversation_id is None:
        return ENDED
    if pressed_on is None:
        return OLD_BUTTON
    recent = uow.execute(
        select(Message.id, Message.content, Delivery.external_id)
        .outerjoin(Delivery, Delivery.id == Message.delivery_id)
        .where(Message.conversation_id == conversation_id, Message.direction == "out")
        .order_by(Message.id.desc()).limit(_RECENT)).all()
    latest = next((row for row in recent if isinstance(row.content, dict) and row.content.get("buttons")), None)
    # Not sent yet (no message id from the messenger): the press cannot be on it, whatever it says.
    if latest is None or latest.external_id != pressed_on:
        return OLD_BUTTON
    answered = uow.execute(select(Message.id).where(
        Message.conversation_id == conversation_id, Message.direction == "in", Message.id > latest.id).limit(1)).first()
    return OLD_BUTTON if answered is not None else None
