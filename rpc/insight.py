"""The console's views of runs and of the caller: process.path, definition.stats,
definition.instances_at, auth.whoami (docs/api.md)."""
from __future__ import annotations

from engine import auth, insight
from rpc.params import optional_int, page_params, reject_unknown, require_int, require_one_of, require_str
from rpc.registry import ANY_KEY, RpcMethod


def path(ctx, params):
    reject_unknown(params, {"instance_id"})
    return insight.instance_path(ctx.uow, ctx.tenant_id, require_int(params, "instance_id"), ctx.specs)


def stats(ctx, params):
    reject_unknown(params, {"definition_id", "sample"})
    sample = optional_int(params, "sample", insight.DEFAULT_SAMPLE, minimum=0, maximum=insight.MAX_SAMPLE)
    return insight.definition_stats(ctx.uow, ctx.tenant_id, require_int(params, "definition_id"), sample, ctx.specs)


def instances_at(ctx, params):
    reject_unknown(params, {"definition_id", "element_id", "state", "page", "per_page"})
    page, per_page = page_params(params)
    return insight.instances_at(ctx.uow, ctx.tenant_id, require_int(params, "definition_id"),
                                require_str(params, "element_id", max_len=255),
                                require_one_of(params, "state", ("waiting", "failed")),
                                page=page, per_page=per_page)


def whoami(ctx, params):
    reject_unknown(params, set())
    return {**auth.describe(ctx.uow, ctx.principal), "methods": ctx.methods.callable_by(ctx.principal)}


METHODS = (
    RpcMethod("process.path", path),
    RpcMethod("definition.stats", stats, "admin"),
    RpcMethod("definition.instances_at", instances_at, "admin"),
    RpcMethod("auth.whoami", whoami, ANY_KEY),
)
