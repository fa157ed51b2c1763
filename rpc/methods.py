"""Imports every method module so that each registers its JSON-RPC methods."""
from rpc import admin, channels, conversations, processes, tasks  # noqa: F401
from rpc import deliveries  # noqa: F401  (delivery.list, delivery.retry)
from rpc import insight  # noqa: F401  (process.path, definition.stats, definition.instances_at, auth.whoami)
