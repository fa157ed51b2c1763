"""The console's views of runs and of the caller: process.path, definition.stats,
definition.instances_at, auth.whoami (docs/api.md)."""
from __future__ import annotations

from engine import auth, insight
from rpc.processes import INSTANCE_ITEM, WAITING
from rpc.registry import ANY_KEY, RpcMethod
from rpc.schema import (ID, INT, PAGING, TEXT, TIME, Choice, Integer, Param, Text, array, nullable, obj, page_of)


def path(ctx, params):
    return insight.instance_path(ctx.uow, ctx.tenant_id, params["instance_id"], ctx.specs)


def stats(ctx, params):
    return insight.definition_stats(ctx.uow, ctx.tenant_id, params["definition_id"], params["sample"], ctx.specs)


def instances_at(ctx, params):
    return insight.instances_at(ctx.uow, ctx.tenant_id, params["definition_id"], params["element_id"],
                                params["state"], page=params["page"], per_page=params["per_page"])


def whoami(ctx, params):
    return {**auth.describe(ctx.uow, ctx.principal), "methods": ctx.methods.callable_by(ctx.principal)}


DEFINITION = Param("definition_id", ID, required=True, description="one exact version")
ELEMENT = obj(element_id=TEXT, name=nullable(TEXT), kind=TEXT)
PASSED = {**ELEMENT, "properties": {**ELEMENT["properties"], "times": INT, "first_at": TIME, "last_at": TIME}}
STEP = {**ELEMENT, "properties": {**ELEMENT["properties"], "state": TEXT, "at": TIME}}
INSTANCE_STATUS = INSTANCE_ITEM["properties"]["status"]

METHODS = (
    RpcMethod("process.path", path, summary="The way an instance went through its diagram: passed, waiting, failed.",
              params=(Param("instance_id", ID, required=True),),
              result=obj(instance_id=INT, definition_id=INT, status=INSTANCE_STATUS, started_at=TIME,
                         completed_at=nullable(TIME), passed=array(PASSED),
                         flows=array(obj(**{"from": TEXT, "to": TEXT})), waiting=array(WAITING),
                         failed=nullable(obj(element_id=nullable(TEXT), message=nullable(TEXT), at=nullable(TIME))),
                         history=array(STEP), history_total=INT)),
    RpcMethod("definition.stats", stats, "admin", summary="Per element of a version: instances waiting, failed "
              "and passed.",
              params=(DEFINITION, Param("sample", Integer(minimum=0, maximum=insight.MAX_SAMPLE),
                                        default=insight.DEFAULT_SAMPLE,
                                        description="how many of the newest instances 'passed' reads")),
              result=obj(definition_id=INT, instances=obj(running=INT, completed=INT, cancelled=INT, failed=INT),
                         elements=array(obj(element_id=TEXT, waiting=INT, failed=INT, passed=INT)),
                         passed_sample=INT)),
    RpcMethod("definition.instances_at", instances_at, "admin", summary="The instances waiting or failed at one "
              "element of a version.",
              params=(DEFINITION, Param("element_id", Text(max_len=255), required=True),
                      Param("state", Choice(("waiting", "failed")), required=True), *PAGING),
              result=page_of(INSTANCE_ITEM)),
    RpcMethod("auth.whoami", whoami, ANY_KEY, summary="The calling key (never the key itself) and the methods it "
              "may call.",
              params=(), result=obj(tenant=TEXT, key_id=INT, name=TEXT, prefix=TEXT, permissions=array(TEXT),
                                    methods=array(TEXT))),
)
