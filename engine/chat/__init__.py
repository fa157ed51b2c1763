"""Talking with customers: channel configurations, conversations, the outbox of an advance, AI dialogs,
and the messengers (``messengers/``: their protocol and wire formats; ``inbound_calls`` and
``messenger_deliveries``: what they send Baton and what Baton sends them)."""
