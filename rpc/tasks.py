"""task.* methods: list, claim, hand over and complete human tasks."""
from __future__ import annotations

from engine import task_holders, tasks
from engine.auth import MAX_NAME
from engine.errors import InvalidParamsError
from engine.runtime.task_assignment import group_token, user_token
from rpc.params import (optional_bool, optional_dict, optional_int, optional_one_of, optional_str, page_params,
                        reject_unknown, require_int)
from rpc.registry import RpcMethod

ME = "me"


def list_(ctx, params):
    reject_unknown(params, {"status", "instance_id", "definition_id", "task_id", "page", "per_page", "assignee",
                            "candidate_group", "mine", "overdue", "sort"})
    page, per_page = page_params(params)
    status = optional_one_of(params, "status", tasks.STATUSES)
    where = tasks.TaskFilter(
        status=status, instance_id=optional_int(params, "instance_id", minimum=1),
        definition_id=optional_int(params, "definition_id", minimum=1),
        task_id=optional_int(params, "task_id", minimum=1),
        assignee=_assignee(ctx, params), audience=_audience(ctx, params, status),
        overdue=optional_bool(params, "overdue"), sort=optional_one_of(params, "sort", tuple(tasks.SORTS), "created"))
    if where.overdue and status not in (None, "in_progress"):
        raise InvalidParamsError("Parameter 'overdue' selects open tasks: leave 'status' out or make it "
                                 "'in_progress'.", data={"param": "overdue"})
    return tasks.list_tasks(ctx.uow, ctx.tenant_id, page=page, per_page=per_page, where=where)


def _assignee(ctx, params):
    """``tasks.ANYONE`` when not given; None (given as null) for unassigned tasks; "me": the key's user."""
    if "assignee" not in params:
        return tasks.ANYONE
    user = optional_str(params, "assignee", max_len=MAX_NAME)
    return task_holders.operator_of(ctx.principal) if user == ME else user


def _audience(ctx, params, status):
    mine = optional_bool(params, "mine")
    group = optional_str(params, "candidate_group", max_len=MAX_NAME)
    if not mine and group is None:
        return None
    if status not in (None, "in_progress"):
        name = "mine" if mine else "candidate_group"
        raise InvalidParamsError(f"Parameter '{name}' selects open tasks: leave 'status' out or make it "
                                 "'in_progress'.", data={"param": name})
    principal = ctx.principal
    if group is not None:
        return () if mine and group not in principal.groups else (group_token(group),)
    if not principal.user and not principal.groups:
        raise InvalidParamsError("Parameter 'mine' needs an API key that stands for a user or groups "
                                 "(apikey.create with 'user' and 'groups').", data={"param": "mine"})
    return tuple(([user_token(principal.user)] if principal.user else []) + [group_token(g) for g in principal.groups])


def complete(ctx, params):
    reject_unknown(params, {"task_id", "result"})
    return tasks.complete(ctx.uow, ctx.tenant_id, require_int(params, "task_id"), optional_dict(params, "result"),
                          principal=ctx.principal)


def claim(ctx, params):
    reject_unknown(params, {"task_id"})
    return task_holders.claim_task(ctx.uow, ctx.principal, require_int(params, "task_id"))


def unclaim(ctx, params):
    reject_unknown(params, {"task_id"})
    return task_holders.unclaim_task(ctx.uow, ctx.principal, require_int(params, "task_id"))


def assign(ctx, params):
    reject_unknown(params, {"task_id", "user"})
    task_id = require_int(params, "task_id")
    return task_holders.assign_task(ctx.uow, ctx.principal, task_id, assignee_param(params))


def assignee_param(params) -> str | None:
    """``user`` of an assign method: required, a name or null (to nobody)."""
    if "user" not in params:
        raise InvalidParamsError("Missing required parameter 'user' (a user name, or null to hand it to nobody).",
                                 data={"param": "user"})
    user = params["user"]
    if user is None:
        return None
    if not isinstance(user, str) or not user.strip() or len(user) > MAX_NAME or "," in user:
        raise InvalidParamsError(f"Parameter 'user' must be a user name of 1 to {MAX_NAME} characters (no commas), "
                                 "or null.", data={"param": "user"})
    return user.strip()


METHODS = (
    RpcMethod("task.list", list_),
    RpcMethod("task.complete", complete),
    RpcMethod("task.claim", claim),
    RpcMethod("task.unclaim", unclaim),
    RpcMethod("task.assign", assign),
)
