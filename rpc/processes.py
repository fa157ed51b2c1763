"""process.* methods: the declared params, then the engine."""
from __future__ import annotations

from engine import history, instances, repairs
from engine.errors import InvalidParamsError
from engine.store.history import KINDS
from rpc.registry import RpcMethod
from rpc.schema import (BOOL, ID, INT, OBJECT, PAGING, TEXT, TIME, Choice, Flag, IdOrCode, JsonObject, ListOf,
                        Param, Text, array, nullable, obj, one_of, page_of)


def start(ctx, params):
    definition = instances.resolve_definition(ctx.uow, ctx.tenant_id, params["definition_id"])
    return instances.start(ctx.uow, ctx.tenant_id, definition, params.get("variables"))


def status(ctx, params):
    return instances.status(ctx.uow, ctx.tenant_id, params["instance_id"])


def cancel(ctx, params):
    return instances.cancel(ctx.uow, ctx.tenant_id, params["instance_id"])


def list_(ctx, params):
    return instances.list_instances(ctx.uow, ctx.tenant_id, status=params.get("status"),
                                    definition_id=params.get("definition_id"), page=params["page"],
                                    per_page=params["per_page"])


def message(ctx, params):
    return instances.send_message(ctx.uow, ctx.tenant_id, params["instance_id"], params["message"],
                                  params.get("variables"))


def retry(ctx, params):
    return instances.retry(ctx.uow, ctx.tenant_id, params["instance_id"], params.get("variables"))


def history_(ctx, params):
    return history.read(ctx.uow, ctx.tenant_id, params["instance_id"], page=params["page"],
                        per_page=params["per_page"])


def set_variables(ctx, params):
    variables, remove = params.get("variables") or {}, params.get("remove") or []
    if not variables and not remove:
        raise InvalidParamsError("Give 'variables' to set or 'remove' to remove: there is nothing to change.",
                                 data={"cause": "nothing_to_change"})
    return repairs.set_variables(ctx.uow, ctx.specs, ctx.tenant_id, params["instance_id"], variables, remove)


def skip(ctx, params):
    return repairs.skip(ctx.uow, ctx.specs, ctx.tenant_id, params["instance_id"], params["element_id"],
                        params.get("variables"), dry_run=params["dry_run"])


def rewind(ctx, params):
    return repairs.rewind(ctx.uow, ctx.specs, ctx.tenant_id, params["instance_id"], params["element_id"],
                          params.get("variables"), dry_run=params["dry_run"])


INSTANCE = Param("instance_id", ID, required=True)
VARIABLES = Param("variables", JsonObject(), description="merged into the instance's variables")
STATUS = one_of(*instances.STATUSES)
ERROR = nullable(obj(message=TEXT, element_id=nullable(TEXT)))
# What an instance waits at (docs/api.md, process.status): the element and its kind, then what it waits for.
WAITING = obj(("message", "messages", "correlation", "signal", "signals", "topic", "due_at", "operator"),
              element_id=TEXT, kind=TEXT, message=TEXT, messages=array(TEXT), correlation=OBJECT, signal=TEXT,
              signals=array(TEXT), topic=TEXT, due_at=TIME, operator=TEXT)
# An instance in a list (process.list, definition.instances_at).
# One event of an instance's history (process.history).
ACTOR = obj(type=one_of("api_key", "webhook", "channel", "system"), name=TEXT)
HISTORY_EVENT = obj(event_id=INT, at=TIME, kind=one_of(*KINDS), element_id=nullable(TEXT), actor=ACTOR, detail=OBJECT)
# What a skip or rewind did (or, dry_run, would do).
MOVED = obj(instance_id=INT, status=STATUS, element_id=TEXT, dry_run=BOOL,
            cancelled=array(obj(element_id=TEXT, kind=TEXT)))
ELEMENT = Param("element_id", Text(max_len=255), required=True, description="the BPMN element's id")
DRY_RUN = Param("dry_run", Flag(), default=False,
                description="true: check it and answer what it would cancel, change nothing")
INSTANCE_ITEM = obj(instance_id=INT, status=STATUS, definition_id=INT, started_at=TIME,
                    completed_at=nullable(TIME), waiting_at=array(TEXT), failed_at=nullable(TEXT))

METHODS = (
    RpcMethod("process.start", start, summary="Start an instance of a definition (a version, or a code's latest).",
              params=(Param("definition_id", IdOrCode(), required=True,
                            description="an integer: that version; a string: the code's latest version"),
                      Param("variables", JsonObject(), description="the instance's first variables")),
              result=obj(instance_id=INT, status=one_of("running"), definition_id=INT)),
    RpcMethod("process.status", status, summary="An instance's status, variables, error and what it waits at.",
              params=(INSTANCE,),
              result=obj(instance_id=INT, status=STATUS, definition_id=INT, code=TEXT, version=INT, variables=OBJECT,
                         started_at=TIME, completed_at=nullable(TIME), error=ERROR, waiting_for=array(WAITING))),
    RpcMethod("process.cancel", cancel, summary="Cancel a running instance: its open tasks become cancelled.",
              params=(INSTANCE,), result=obj(instance_id=INT, status=one_of("cancelled"))),
    RpcMethod("process.list", list_, summary="The tenant's instances, newest first.",
              params=(Param("status", Choice(instances.STATUSES)),
                      Param("definition_id", ID, description="one exact version"), *PAGING),
              result=page_of(INSTANCE_ITEM)),
    RpcMethod("process.message", message, summary="Deliver a message to an instance waiting for it by name.",
              params=(INSTANCE, Param("message", Text(max_len=255), required=True,
                                      description="the BPMN message's name (else its id)"),
                      Param("variables", JsonObject(), description="merged into the receiving element's variables")),
              result=obj(instance_id=INT, delivered=BOOL)),
    RpcMethod("process.retry", retry, summary="Resume a failed instance at the element that failed.",
              params=(INSTANCE, VARIABLES), result=obj(instance_id=INT, status=one_of("running"))),
    RpcMethod("process.history", history_, permission="process.status",
              summary="An instance's history, oldest first: what happened to it and who did it.",
              params=(INSTANCE, *PAGING), result=page_of(HISTORY_EVENT)),
    RpcMethod("process.set_variables", set_variables,
              summary="Set and remove variables of a running or failed instance, between two of its steps.",
              params=(INSTANCE, Param("variables", JsonObject(), description="names and their new values"),
                      Param("remove", ListOf(Text(max_len=255), max_items=1000), description="names to remove")),
              result=obj(instance_id=INT, variables=OBJECT)),
    RpcMethod("process.skip", skip,
              summary="Complete the element a running or failed instance waits or failed at, without running it.",
              params=(INSTANCE, ELEMENT, Param("variables", JsonObject(), description="merged in before it goes on"),
                      DRY_RUN), result=MOVED),
    RpcMethod("process.rewind", rewind,
              summary="Take an instance back to an element it passed; it runs again from there.",
              params=(INSTANCE, ELEMENT, Param("variables", JsonObject(), description="merged in at the element"),
                      DRY_RUN), result=MOVED),
)
