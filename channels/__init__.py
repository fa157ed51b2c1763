"""Inbound and outbound HTTP channels: webhook starts, health, and (later) chat channels."""
