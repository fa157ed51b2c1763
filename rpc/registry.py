"""The JSON-RPC method table: each method module declares its ``METHODS``; ``create_app`` builds the
table (``rpc.build_methods``) and hands it to the endpoint.

A method is declared once, as data, and that declaration is both the check of its params and its
description in the OpenRPC document (``rpc.discover``, ``GET /v1/openrpc.json``)::

    RpcMethod("process.message", message, summary="Deliver a message to a waiting instance.",
              params=(Param("instance_id", ID, required=True),
                      Param("message", Text(max_len=255), required=True, description="the message's name"),
                      Param("variables", JsonObject())),
              result=obj(instance_id=INT, delivered=BOOL))

The adapter (``rpc/endpoint.py``) authenticates, checks ``permission``, checks the params against
``params`` (``rpc.schema``: unknown names refused, each value checked, defaults filled in; ``null``
counts as absent) and calls ``handler(ctx: RpcContext, params: dict) -> dict`` with the checked
params. The handler calls the engine with the call's unit of work (``ctx.uow``), raises errors from
``engine.errors`` and returns a JSON-able dict that ``result`` (a JSON Schema, ``rpc.schema``'s
helpers) describes. The adapter commits the unit of work (or rolls it back) and translates errors.

A method declared without ``params`` (the older form) gets its params unchecked and checks them
itself with ``rpc.params``; it is published with no params, and tests/unit/rpc/test_openrpc.py fails
until it is declared: converting one is moving its checks into ``params`` (the same messages).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from rpc.schema import Param, check_params

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
    openrpc: Any = None  # the OpenRPC document of the table (rpc.openrpc), built once per app
    uow: Any = None  # engine.store.unit_of_work.UnitOfWork: this call's, committed by the adapter
    units: Any = None  # engine.store.unit_of_work.Units: where the adapter begins the units of later steps

    @property
    def tenant_id(self) -> int:
        return self.principal.tenant_id


# The permission of a method any valid key may call: a key asking what it may do needs no grant
# to ask. Not a permission a key can hold (engine.auth refuses a space in one).
ANY_KEY = "any key"


@dataclass(frozen=True)
class Audit:
    """How an administration call is written to the audit log (``engine.audit``): the kind of
    object it touches and its id, taken from a param or, when that is absent, from the answer
    (``pick``: the id from both, for an id made of several fields). Never a secret."""

    kind: str
    param: str | None = None
    answer: str | None = None
    pick: Callable[[dict[str, Any], Any], Any] | None = None

    def target_id(self, params: Any, result: Any) -> Any:
        params = params if isinstance(params, dict) else {}
        if self.pick is not None:
            return self.pick(params, result)
        if self.param is not None and params.get(self.param) is not None:
            return params[self.param]
        if self.answer is not None and isinstance(result, dict):
            return result.get(self.answer)
        return None


@dataclass(frozen=True)
class RpcMethod:
    """A method's name, its handler, the permission a key needs (default: the name; ``ANY_KEY``:
    none beyond being valid), and its declaration: params, result schema, a one-line summary;
    ``audit``: an administration call, recorded in the audit log in its own unit of work."""

    name: str
    handler: Handler
    permission: str | None = None
    params: tuple[Param, ...] | None = None  # None: undeclared, the handler checks its own params
    result: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    audit: Audit | None = None

    def call(self, ctx: "RpcContext", params: dict[str, Any]) -> Any:
        """The handler's answer to ``params``, checked against the declaration first."""
        return self.handler(ctx, params if self.params is None else check_params(self.params, params))

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
