"""Talking with customers: channel configurations, conversations, the outbox of an advance, AI dialogs (and messengers)."""
