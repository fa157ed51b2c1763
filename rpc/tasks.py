"""task.* methods: list, claim, hand over and complete human tasks, or end them with a BPMN error
or escalation."""
from __future__ import annotations

from engine import task_holders, task_throws, tasks
from engine.auth import MAX_NAME
from engine.errors import InvalidParamsError
from engine.runtime.task_assignment import group_token, user_token
from rpc.registry import RpcMethod
from rpc.schema import (ANY, ID, INT, OBJECT, PAGING, TEXT, TIME, Choice, Flag, JsonObject, Param, Text, array,
                        nullable, obj, one_of, page_of)

ME = "me"
OPEN_ONLY = (None, "in_progress")


def list_(ctx, params):
    status = params.get("status")
    where = tasks.TaskFilter(
        status=status, instance_id=params.get("instance_id"), definition_id=params.get("definition_id"),
        task_id=params.get("task_id"), assignee=_assignee(ctx, params), audience=_audience(ctx, params, status),
        overdue=params.get("overdue", False), sort=params["sort"])
    if where.overdue and status not in OPEN_ONLY:
        raise InvalidParamsError("Parameter 'overdue' selects open tasks: leave 'status' out or make it "
                                 "'in_progress'.", data={"param": "overdue"})
    return tasks.list_tasks(ctx.uow, ctx.tenant_id, page=params["page"], per_page=params["per_page"], where=where)


def _assignee(ctx, params):
    """``tasks.ANYONE`` when not given; None (given as null) for unassigned tasks; "me": the key's user."""
    if "assignee" not in params:
        return tasks.ANYONE
    user = params["assignee"]
    if user == ME and not ctx.principal.user:
        raise InvalidParamsError("'assignee': 'me' needs a key that stands for a user (apikey.create with 'user'); "
                                 "this key stands for nobody.", data={"param": "assignee"})
    return ctx.principal.user if user == ME else user


def _audience(ctx, params, status):
    mine = params.get("mine", False)
    group = params.get("candidate_group")
    if not mine and group is None:
        return None
    if status not in OPEN_ONLY:
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
    return tasks.complete(ctx.uow, ctx.tenant_id, params["task_id"], params.get("result"), principal=ctx.principal)


def claim(ctx, params):
    return task_holders.claim_task(ctx.uow, ctx.principal, params["task_id"])


def unclaim(ctx, params):
    return task_holders.unclaim_task(ctx.uow, ctx.principal, params["task_id"])


def assign(ctx, params):
    return task_holders.assign_task(ctx.uow, ctx.principal, params["task_id"], assignee_of(params))


def assignee_of(params) -> str | None:
    """The ``user`` of an assign method (declared by ``ASSIGNEE``): a name without commas, or null."""
    user = params["user"]
    if user is None:
        return None
    if not user.strip() or "," in user:
        raise InvalidParamsError(f"Parameter 'user' must be a user name of 1 to {MAX_NAME} characters (no commas), "
                                 "or null.", data={"param": "user"})
    return user.strip()


ASSIGNEE = Param("user", Text(max_len=MAX_NAME), required=True, nullable=True,
                 description="a user name, or null to hand it to nobody")


def bpmn_error(ctx, params):
    return task_throws.throw(ctx.uow, ctx.tenant_id, params["task_id"], task_throws.ERROR, params["error_code"],
                             params.get("message"), params.get("variables") or {}, ctx.specs)


def bpmn_escalation(ctx, params):
    return task_throws.throw(ctx.uow, ctx.tenant_id, params["task_id"], task_throws.ESCALATION,
                             params["escalation_code"], None, params.get("variables") or {}, ctx.specs)


FORM_FIELD = obj(("options", "default"), id=TEXT, label=TEXT, type=TEXT, required={"type": "boolean"},
                 options=array(obj(id=TEXT, name=TEXT)), default=ANY)
TASK = obj(task_id=INT, instance_id=INT, definition_id=INT, element_id=TEXT, name=nullable(TEXT),
           status=one_of(*tasks.STATUSES), form=array(FORM_FIELD), buttons=array(TEXT), binding_id=nullable(INT),
           variables=OBJECT, created_at=TIME, completed_at=nullable(TIME), result=nullable(OBJECT),
           assignee=nullable(TEXT), candidate_users=array(TEXT), candidate_groups=array(TEXT),
           due_at=nullable(TIME), follow_up_at=nullable(TIME), priority=nullable(INT),
           form_schema=nullable(OBJECT))
HOLDERS = obj(task_id=INT, status=one_of(*tasks.STATUSES), assignee=nullable(TEXT), candidate_users=array(TEXT),
              candidate_groups=array(TEXT))

METHODS = (
    RpcMethod("task.list", list_, summary="Human tasks (user and manual tasks), newest first.",
              params=(Param("status", Choice(tasks.STATUSES)), Param("instance_id", ID), Param("definition_id", ID),
                      Param("task_id", ID, description="one task: a page of at most one item"),
                      Param("assignee", Text(max_len=MAX_NAME), nullable=True,
                            description=f"tasks held by this user; '{ME}': the key's user; null: held by nobody"),
                      Param("candidate_group", Text(max_len=MAX_NAME),
                            description="open tasks of this group that nobody holds"),
                      Param("mine", Flag(), description="open tasks held by the key's user or offered to it or "
                                                        "its groups"),
                      Param("overdue", Flag(), description="open tasks past their due date"),
                      Param("sort", Choice(tuple(tasks.SORTS)), default="created",
                            description="created: newest first; due: soonest due first, undated last; "
                                        "priority: highest first"),
                      *PAGING),
              result=page_of(TASK)),
    RpcMethod("task.complete", complete, summary="Complete a task; the result's keys become instance variables.",
              params=(Param("task_id", ID, required=True),
                      Param("result", JsonObject(), description="checked against the task's form and buttons")),
              result=obj(task_id=INT, status=one_of("completed"), instance_id=INT)),
    RpcMethod("task.claim", claim, summary="Hold an open task for the key's user; of two claims one wins.",
              params=(Param("task_id", ID, required=True),), result=HOLDERS),
    RpcMethod("task.unclaim", unclaim, summary="Give back a task the key's user holds (an admin: any task).",
              params=(Param("task_id", ID, required=True),), result=HOLDERS),
    RpcMethod("task.assign", assign, summary="Hand an open task to a user, or to nobody.",
              params=(Param("task_id", ID, required=True), ASSIGNEE), result=HOLDERS),
    RpcMethod("task.bpmn_error", bpmn_error, summary="End a task with a BPMN error that an error boundary event "
              "of the task catches (Camunda's handleBpmnError).",
              params=(Param("task_id", ID, required=True), Param("error_code", Text(max_len=255), required=True),
                      Param("message", Text(max_len=2000), description="the boundary's path gets it as errorMessage"),
                      Param("variables", JsonObject(), description="merged into the variables the boundary's path "
                                                                   "goes on with")),
              result=obj(task_id=INT, status=one_of("cancelled"), instance_id=INT)),
    RpcMethod("task.bpmn_escalation", bpmn_escalation, summary="Raise an escalation at a task that an escalation "
              "boundary event of the task catches (Camunda's handleEscalation).",
              params=(Param("task_id", ID, required=True), Param("escalation_code", Text(max_len=255), required=True),
                      Param("variables", JsonObject(), description="merged into the variables the boundary's path "
                                                                   "goes on with")),
              result=obj(task_id=INT, status=one_of("in_progress", "cancelled"), instance_id=INT)),
)
