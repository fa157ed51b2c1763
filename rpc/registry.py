"""The JSON-RPC method table: each method module declares its ``METHODS``; ``create_app`` builds the
table (``rpc.build_methods``) and hands it to the endpoint.

A handler is ``handler(ctx: RpcContext, params: dict) -> dict``. It checks its params with
``rpc.params``, calls the engine with the call's unit of work (``ctx.uow``), raises errors from
``engine.errors`` and returns a JSON-able dict. The adapter (``rpc/endpoint.py``) authenticates,
checks ``permission``, commits the call's unit of work (or rolls it back) and translates errors.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterator

Handler = Callable[["RpcContext", dict[str, Any]], Any]


@dataclass(frozen=True)
class RpcContext:
    """What a handler knows about its call: who is calling, through which path, with which settings."""

    principal: Any  # engine.auth.Principal: tenant_id, key_id, require(permission)
    settings: Any   # app.Settings (public_url, allow_private_urls, ...)
    legacy: bool = False  # True on the old ``/rpc`` path
    methods: "MethodTable | None" = None  # the table the call came through (auth.whoami lists it)
    specs: Any = None  # the process's engine.store.workflows.SpecCache (methods that read instance state)
    long_poll: Any = None  # engine.jobs.wakers.LongPoll: how external.fetch_and_lock waits
    uow: Any = None  # engine.store.unit_of_work.UnitOfWork: this call's, committed by the adapter
    units: Any = None  # engine.store.unit_of_work.Units: where the adapter begins the units of later steps

    @property
    def tenant_id(self) -> int:
        return self.principal.tenant_id


# The permission of a method any valid key may call: a key asking what it may do needs no grant
# to ask. Not a permission a key can hold (engine.auth refuses a space in one).
ANY_KEY = "any key"


@dataclass(frozen=True)
class RpcMethod:
    """A method's name, its handler, and the permission a key needs (default: the name; ``ANY_KEY``:
    none beyond being valid)."""

    name: str
    handler: Handler
    permission: str | None = None

    @property
    def needs(self) -> str:
        return self.permission or self.name

    def allows(self, principal) -> bool:
        return self.needs == ANY_KEY or principal.allows(self.needs)

    def require(self, principal) -> None:
        """ForbiddenError (naming the permission) unless ``principal`` may call this method."""
        if self.needs != ANY_KEY:
            principal.require(self.needs)


class MethodTable(Mapping[str, RpcMethod]):
    """Methods by name; a name declared twice is a mistake and refused."""

    def __init__(self, methods: Iterable[RpcMethod]):
        self._methods: dict[str, RpcMethod] = {}
        for method in methods:
            if method.name in self._methods:
                raise ValueError(f"JSON-RPC method {method.name!r} is declared twice.")
            self._methods[method.name] = method

    def __getitem__(self, name: str) -> RpcMethod:
        return self._methods[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._methods)

    def __len__(self) -> int:
        return len(self._methods)

    def callable_by(self, principal) -> list[str]:
        """The names of the methods ``principal`` may call, sorted."""
        return sorted(name for name, method in self._methods.items() if method.allows(principal))
