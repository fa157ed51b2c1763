"""Viber as a ``Messenger``: the REST Bot API (``bot_api``: connecting, verifying, sending, reading
answers) and the callbacks it sends (``callbacks``)."""
from engine.chat.messengers.viber.bot_api import Viber

__all__ = ["Viber"]
