"""``audit.list`` (permission ``admin``): the audit log of administration, newest first (engine.audit)."""
from __future__ import annotations

from engine import audit
from rpc.registry import RpcMethod
from rpc.schema import ID, INT, PAGING, TEXT, TIME, Param, Text, nullable, obj, page_of


def audit_list(ctx, params):
    return audit.list_entries(ctx.uow, ctx.tenant_id, page=params["page"], per_page=params["per_page"],
                              method=params.get("method"), key_id=params.get("key_id"))


ENTRY = obj(audit_id=INT, at=TIME,
            actor=obj(type=TEXT, name=TEXT, key_id=nullable(INT)),
            method=TEXT, target=nullable(obj(kind=TEXT, id=nullable(TEXT))))

METHODS = (
    RpcMethod("audit.list", audit_list, "admin",
              summary="Administration calls (deploys, channel, key and webhook changes, re-sent deliveries, "
                      "secret rotation), newest first; never a secret.",
              params=(Param("method", Text(max_len=64), description="only calls of this method"),
                      Param("key_id", ID, description="only calls made with this API key"), *PAGING),
              result=page_of(ENTRY)),
)
