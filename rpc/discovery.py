"""rpc.discover: the OpenRPC document of every method (OpenRPC's service discovery method); any
valid key may read it, as anyone may read ``GET /v1/openrpc.json``."""
from __future__ import annotations

from rpc.registry import ANY_KEY, RpcMethod

# What OpenRPC's service discovery method answers: a document valid under its meta-schema.
META_SCHEMA = {"$ref": "https://raw.githubusercontent.com/open-rpc/meta-schema/master/schema.json"}


def discover(ctx, params):
    return ctx.openrpc


METHODS = (
    RpcMethod("rpc.discover", discover, ANY_KEY, summary="This API's OpenRPC document.", params=(),
              result=META_SCHEMA),
)
