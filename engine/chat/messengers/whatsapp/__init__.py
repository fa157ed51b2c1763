"""WhatsApp as a ``Messenger``: Meta's Cloud API (``cloud_api``: checking the number, the handshake
and signatures, sending, reading answers) and the notifications it sends (``notifications``)."""
from engine.chat.messengers.whatsapp.cloud_api import WhatsApp

__all__ = ["WhatsApp"]
