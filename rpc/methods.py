"""Imports every method module so that each registers its JSON-RPC methods."""
from rpc import admin, processes, tasks  # noqa: F401
