"""delivery.* methods (permission ``admin``): list outbound deliveries, re-send a dead one.

Answers never carry a body or a secret: bodies may hold customer text, secrets sign requests.
"""
from __future__ import annotations

from engine.outbound import delivery
from rpc.registry import Audit, RpcMethod
from rpc.schema import ID, INT, PAGING, TEXT, TIME, Choice, Flag, Param, nullable, obj, one_of, page_of


def delivery_list(ctx, params):
    return delivery.list_deliveries(ctx.uow, ctx.tenant_id, status=params.get("status"), page=params["page"],
                                    per_page=params["per_page"], failing=params.get("failing", False))


def delivery_retry(ctx, params):
    return delivery.retry(ctx.uow, ctx.tenant_id, params["delivery_id"])


DELIVERY = obj(delivery_id=INT, delivery_uid=TEXT, channel_id=nullable(INT), event=TEXT, url=TEXT,
               status=one_of(*delivery.STATUSES), attempts=INT, last_status=nullable(INT), last_error=nullable(TEXT),
               created_at=TIME, next_attempt_at=nullable(TIME), sent_at=nullable(TIME))

METHODS = (
    RpcMethod("delivery.list", delivery_list, "admin", summary="Outbound deliveries, newest first (never a body).",
              params=(Param("status", Choice(delivery.STATUSES)),
                      Param("failing", Flag(), description="only queued deliveries that failed at least once and wait for their next attempt"), *PAGING), result=page_of(DELIVERY)),
    RpcMethod("delivery.retry", delivery_retry, "admin", summary="Queue a dead delivery again, now.",
              params=(Param("delivery_id", ID, required=True),),
              result=obj(delivery_id=INT, status=one_of(delivery.QUEUED)),
              audit=Audit("delivery", param="delivery_id")),
)
