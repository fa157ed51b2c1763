"""message.correlate and signal.broadcast: messages and signals from outside (docs/api.md)."""
from __future__ import annotations

from engine import messages
from rpc.registry import RpcMethod
from rpc.schema import INT, TEXT, Flag, JsonObject, Param, Text, array, obj

NAME = Text(max_len=255)
VARIABLES = Param("variables", JsonObject(),
                  description="merged into the receiving element's variables (or the started instance's)")


def correlate(ctx, params):
    return messages.correlate(ctx.uow, ctx.tenant_id, params["name"], params.get("correlation") or {},
                              params.get("variables") or {}, every=bool(params.get("all")))


def broadcast(ctx, params):
    return messages.broadcast(ctx.uow, ctx.tenant_id, params["name"], params.get("variables") or {})


METHODS = (
    RpcMethod("message.correlate", correlate, summary="Deliver a message by name and correlation values.",
              params=(Param("name", NAME, required=True, description="the message's name"),
                      Param("correlation", JsonObject(), description="{key: value} the waiting instance must match"),
                      VARIABLES,
                      Param("all", Flag(), description="default false: the message may reach one instance only")),
              result=obj(message=TEXT, reached=array(INT), started=array(INT))),
    RpcMethod("signal.broadcast", broadcast, summary="Broadcast a signal to every waiting instance and signal start.",
              params=(Param("name", NAME, required=True, description="the signal's name"), VARIABLES),
              result=obj(signal=TEXT, reached=array(INT), started=array(INT))),
)
