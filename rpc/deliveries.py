"""delivery.* methods (permission ``admin``): list outbound deliveries, re-send a dead one.

Answers never carry a body or a secret: bodies may hold customer text, secrets sign requests.
"""
from __future__ import annotations

from engine.outbound import delivery
from rpc.params import optional_bool, optional_one_of, page_params, reject_unknown, require_int
from rpc.registry import RpcMethod


def delivery_list(ctx, params):
    reject_unknown(params, {"status", "page", "per_page", "failing"})
    page, per_page = page_params(params)
    status = optional_one_of(params, "status", delivery.STATUSES)
    return delivery.list_deliveries(ctx.uow, ctx.tenant_id, status=status, page=page, per_page=per_page,
                                    failing=optional_bool(params, "failing"))


def delivery_retry(ctx, params):
    reject_unknown(params, {"delivery_id"})
    return delivery.retry(ctx.uow, ctx.tenant_id, require_int(params, "delivery_id"))


METHODS = (
    RpcMethod("delivery.list", delivery_list, "admin"),
    RpcMethod("delivery.retry", delivery_retry, "admin"),
)
