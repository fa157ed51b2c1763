"""A Python client for a Baton server: a typed call for every JSON-RPC method, one error class, and
an external-task worker. It imports nothing of the server: only ``requests``.

    from baton.client import Client
    client = Client("http://127.0.0.1:5000", api_key)      # or Client.from_environment()
    started = client.process.start("order", variables={"amount": 70})
    client.process.status(started["instance_id"])["status"]

Every failed call raises ``RpcError`` (``code``, ``reason``, ``message``, ``data``). docs/client.md.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from baton.client.methods import Methods
from baton.client.transport import OMIT, RpcError, Transport
from baton.client.worker import BpmnError, ExternalTaskWorker, LockedTask

__all__ = ["Client", "RpcError", "ExternalTaskWorker", "LockedTask", "BpmnError", "OMIT", "DEFAULT_URL"]

DEFAULT_URL = "http://127.0.0.1:5000"


class Client(Methods):
    """Baton's JSON-RPC API at ``url`` with ``api_key``: ``client.<group>.<method>(...)`` for every
    method (``baton.client.methods``), ``client.call(name, **params)`` for any."""

    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, *, timeout_s: float = 30.0):
        if not api_key:
            raise ValueError("An API key is needed: Client(url, api_key).")
        self.transport = Transport(url, api_key, timeout_s=timeout_s)
        super().__init__(self.transport)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ, **options: Any) -> "Client":
        """A client for ``BATON_URL`` (default http://127.0.0.1:5000) with ``BATON_API_KEY``."""
        key = environ.get("BATON_API_KEY", "").strip()
        if not key:
            raise ValueError("BATON_API_KEY is not set: set it to an API key of the server (the first start "
                             "prints one; apikey.create makes more).")
        return cls(environ.get("BATON_URL", "").strip() or DEFAULT_URL, key, **options)

    @property
    def url(self) -> str:
        return self.transport.url

    def call(self, method: str, **params: Any) -> Any:
        """Any method by name, its params as given."""
        return self.transport.call(method, params)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
