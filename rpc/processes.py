"""process.* methods: thin checks of params, then the engine."""
from __future__ import annotations

from engine import instances
from rpc.params import (int_or_str, optional_dict, optional_int, optional_one_of, page_params, reject_unknown,
                        require_int, require_str)
from rpc.registry import RpcMethod


def start(ctx, params):
    reject_unknown(params, {"definition_id", "variables"})
    reference = int_or_str(params, "definition_id")
    variables = optional_dict(params, "variables")
    definition = instances.resolve_definition(ctx.uow, ctx.tenant_id, reference)
    return instances.start(ctx.uow, ctx.tenant_id, definition, variables)


def status(ctx, params):
    reject_unknown(params, {"instance_id"})
    return instances.status(ctx.uow, ctx.tenant_id, require_int(params, "instance_id"))


def cancel(ctx, params):
    reject_unknown(params, {"instance_id"})
    return instances.cancel(ctx.uow, ctx.tenant_id, require_int(params, "instance_id"))


def list_(ctx, params):
    reject_unknown(params, {"status", "definition_id", "page", "per_page"})
    page, per_page = page_params(params)
    return instances.list_instances(ctx.uow,
        ctx.tenant_id, status=optional_one_of(params, "status", instances.STATUSES),
        definition_id=optional_int(params, "definition_id", minimum=1), page=page, per_page=per_page)


def message(ctx, params):
    reject_unknown(params, {"instance_id", "message", "variables"})
    return instances.send_message(ctx.uow, ctx.tenant_id, require_int(params, "instance_id"),
                                  require_str(params, "message", max_len=255), optional_dict(params, "variables"))


def retry(ctx, params):
    reject_unknown(params, {"instance_id", "variables"})
    return instances.retry(ctx.uow, ctx.tenant_id, require_int(params, "instance_id"), optional_dict(params, "variables"))


METHODS = (
    RpcMethod("process.start", start),
    RpcMethod("process.status", status),
    RpcMethod("process.cancel", cancel),
    RpcMethod("process.list", list_),
    RpcMethod("process.message", message),
    RpcMethod("process.retry", retry),
)
