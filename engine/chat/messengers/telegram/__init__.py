"""Telegram as a ``Messenger``: the Bot API (``bot_api``: connecting, verifying, sending, reading
answers) and the webhook updates it sends (``updates``)."""
from engine.chat.messengers.telegram.bot_api import Telegram

__all__ = ["Telegram"]
