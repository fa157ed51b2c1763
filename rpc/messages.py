"""message.correlate and signal.broadcast: messages and signals from outside (docs/api.md)."""
from __future__ import annotations

from engine import messages
from engine.errors import InvalidParamsError
from rpc.params import optional_dict, reject_unknown, require_str
from rpc.registry import RpcMethod


def correlate(ctx, params):
    reject_unknown(params, {"name", "correlation", "variables", "all"})
    every = params.get("all")
    if every is not None and not isinstance(every, bool):
        raise InvalidParamsError("Parameter 'all' must be true or false.", data={"param": "all"})
    return messages.correlate(ctx.uow, ctx.tenant_id, require_str(params, "name", max_len=255),
                              optional_dict(params, "correlation") or {}, optional_dict(params, "variables") or {},
                              every=bool(every))


def broadcast(ctx, params):
    reject_unknown(params, {"name", "variables"})
    return messages.broadcast(ctx.uow, ctx.tenant_id, require_str(params, "name", max_len=255),
                              optional_dict(params, "variables") or {})


METHODS = (
    RpcMethod("message.correlate", correlate),
    RpcMethod("signal.broadcast", broadcast),
)
