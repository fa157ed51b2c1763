"""task.* methods: list and complete human tasks."""
from __future__ import annotations

from engine import tasks
from rpc.params import optional_dict, optional_int, optional_one_of, page_params, reject_unknown, require_int
from rpc.registry import RpcMethod


def list_(ctx, params):
    reject_unknown(params, {"status", "instance_id", "definition_id", "task_id", "page", "per_page"})
    page, per_page = page_params(params)
    return tasks.list_tasks(ctx.uow,
        ctx.tenant_id, status=optional_one_of(params, "status", tasks.STATUSES),
        instance_id=optional_int(params, "instance_id", minimum=1),
        definition_id=optional_int(params, "definition_id", minimum=1),
        task_id=optional_int(params, "task_id", minimum=1), page=page, per_page=per_page)


def complete(ctx, params):
    reject_unknown(params, {"task_id", "result"})
    return tasks.complete(ctx.uow, ctx.tenant_id, require_int(params, "task_id"), optional_dict(params, "result"))


METHODS = (
    RpcMethod("task.list", list_),
    RpcMethod("task.complete", complete),
)
