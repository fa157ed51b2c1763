"""The console's views of runs and of the caller: process.path, definition.stats,
definition.instances_at, auth.whoami (docs/api.md)."""
from __future__ import annotations

from engine import auth, insight
from rpc.params import optional_int, page_params, reject_unknown, require_int, require_one_of, require_str
from rpc.registry import ANY_KEY, METHODS, rpc_method


@rpc_method("process.path")
def path(ctx, params):
    reject_unknown(params, {"instance_id"})
    return insight.instance_path(ctx.tenant_id, require_int(params, "instance_id"))


@rpc_method("definition.stats", permission="admin")
def stats(ctx, params):
    reject_unknown(params, {"definition_id", "sample"})
    sample = optional_int(params, "sample", insight.DEFAULT_SAMPLE, minimum=0, maximum=insight.MAX_SAMPLE)
    return insight.definition_stats(ctx.tenant_id, require_int(params, "definition_id"), sample)


@rpc_method("definition.instances_at", permission="admin")
def instances_at(ctx, params):
    reject_unknown(params, {"definition_id", "element_id", "state", "page", "per_page"})
    page, per_page = page_params(params)
    return insight.instances_at(ctx.tenant_id, require_int(params, "definition_id"),
                                require_str(params, "element_id", max_len=255),
                                require_one_of(params, "state", ("waiting", "failed")),
                                page=page, per_page=per_page)


@rpc_method("auth.whoami", permission=ANY_KEY)
def whoami(ctx, params):
    reject_unknown(params, set())
    principal = ctx.principal
    allowed = [name for name, method in sorted(METHODS.items())
               if method.permission == ANY_KEY or principal.allows(method.permission)]
    return {**auth.describe(principal), "methods": allowed}
