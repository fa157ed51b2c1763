"""Migration of live instances to another version: ``definition.diff`` (admin) and ``process.migrate``."""
from __future__ import annotations

from engine import migration
from rpc.registry import RpcMethod
from rpc.schema import BOOL, ID, INT, TEXT, Flag, ListOf, Param, array, obj, one_of


def diff(ctx, params):
    return migration.diff(ctx.uow, ctx.tenant_id, params["from_definition_id"], params["to_definition_id"], ctx.specs)


def migrate(ctx, params):
    return migration.migrate(ctx.uow, ctx.tenant_id, params["instance_ids"], params["to_definition_id"],
                             params["dry_run"], ctx.specs)


RESULT_ITEM = obj(("reason",), instance_id=INT,
                  status=one_of(migration.MIGRATED, migration.REFUSED, migration.WOULD_MIGRATE), reason=TEXT)

METHODS = (
    RpcMethod("definition.diff", diff, "admin",
              summary="The element ids added, removed and changed from one definition to another.",
              params=(Param("from_definition_id", ID, required=True, description="the version compared from"),
                      Param("to_definition_id", ID, required=True, description="the version compared to")),
              result=obj(from_definition_id=INT, to_definition_id=INT, code=TEXT, from_version=INT,
                         to_version=INT, added=array(TEXT), removed=array(TEXT), changed=array(TEXT))),
    RpcMethod("process.migrate", migrate,
              summary="Move running instances to another version of their process (each all or nothing).",
              params=(Param("instance_ids", ListOf(ID, min_items=1, max_items=migration.MAX_INSTANCES,
                                                   noun="instance ids"), required=True,
                            description=f"1 to {migration.MAX_INSTANCES} instances of the target's process"),
                      Param("to_definition_id", ID, required=True, description="the version to move them to"),
                      Param("dry_run", Flag(), default=False,
                            description="check and answer what would happen; change nothing")),
              result=obj(to_definition_id=INT, version=INT, dry_run=BOOL, results=array(RESULT_ITEM))),
)
