"""Every JSON-RPC method Baton serves: the method groups' ``METHODS``, in one table."""
from __future__ import annotations

from rpc import (admin, audit, channel_configs, conversations, deliveries, discovery, external, insight, messages,
                 migration, processes, tasks)
from rpc.registry import MethodTable


def build_methods() -> MethodTable:
    return MethodTable([*processes.METHODS, *tasks.METHODS, *conversations.METHODS, *admin.METHODS,
                        *channel_configs.METHODS, *deliveries.METHODS, *external.METHODS, *messages.METHODS,
                        *insight.METHODS, *migration.METHODS, *audit.METHODS, *discovery.METHODS])
