"""The JSON-RPC method registry: method modules declare handlers with ``@rpc_method``.

A handler is ``handler(ctx: RpcContext, params: dict) -> dict``. It checks its params with
``rpc.params``, calls the engine, raises errors from ``engine.errors`` and returns a JSON-able dict.
The adapter (``rpc/endpoint.py``) authenticates, checks ``permission`` and translates errors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

Handler = Callable[["RpcContext", dict[str, Any]], Any]


@dataclass(frozen=True)
class RpcContext:
    """What a handler knows about its call: who is calling and through which path."""

    principal: Any  # engine.auth.Principal: tenant_id, key_id, require(permission)
    legacy: bool = False  # True on the old ``/rpc`` path

    @property
    def tenant_id(self) -> int:
        return self.principal.tenant_id


@dataclass(frozen=True)
class RpcMethod:
    name: str
    handler: Handler
    permission: str


METHODS: dict[str, RpcMethod] = {}
# The permission of a method that any valid key may call (a key asking what it may do).
ANY_KEY = ""


def rpc_method(name: str, *, permission: str | None = None) -> Callable[[Handler], Handler]:
    """Register ``handler`` as JSON-RPC method ``name``; the key needs ``permission`` (default: ``name``)."""

    def register(handler: Handler) -> Handler:
        known = METHODS.get(name)
        # The same function again is a module reload; a different one is a copy-paste bug.
        if known is not None and _qualname(known.handler) != _qualname(handler):
            raise ValueError(f"JSON-RPC method {name!r} is registered twice.")
        METHODS[name] = RpcMethod(name=name, handler=handler, permission=name if permission is None else permission)
        return handler

    return register


def _qualname(handler: Handler) -> str:
    return f"{getattr(handler, '__module__', '')}.{getattr(handler, '__qualname__', repr(handler))}"
