"""Webhook starts: one ``accept`` for every inbound call, whichever door it came
through, and the routes' administration (``webhook.list``, ``webhook.rotate``, ``webhook.update``).

A call starts the latest version of its route's code: one read of the route with that version,
the optional signature check, the optional ``Idempotency-Key`` (the first answer is replayed for
24 hours), the instance and its start job, in the door's unit of work on the driver connection
(on PostgreSQL, without a key: one statement in autocommit).
"""
from __future__ import annotations

import hashlib
import hmac
import time
from collections import namedtuple
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, bindparam, delete, insert, select
from sqlalchemy.exc import IntegrityError

from engine.definitions import new_webhook_id, webhook_url
from engine.errors import BadRequestError, BatonError, InvalidParamsError, NotFoundError, UnauthorizedError
from engine.jobs.kinds import START
from engine.outbound import standard_webhooks
from engine.store import writes
from engine.store.db import iso, utcnow
from engine.store.models import Definition, IdempotencyRecord, WebhookMessageId, WebhookRoute
from engine.store.paging import page_of
from engine.store.driver import Statement
from engine.store.unit_of_work import UnitOfWork

IDEMPOTENCY_WINDOW = timedelta(hours=24)
# A webhook-id is remembered for twice the timestamp tolerance: a replay after that carries a
# timestamp too old to pass.
SEEN_WINDOW = timedelta(seconds=2 * standard_webhooks.TOLERANCE_S)
MAX_IDEMPOTENCY_KEY = 255
MAX_WEBHOOK_ID = 64  # the column's size


@dataclass(frozen=True)
class WebhookCall:
    """An inbound call as the door read it. ``variables`` is the decoded body, or the error that
    decoding it raised: it is raised only after the route and the signature are checked, so an
    unknown route answers 404 and a bad signature 401 whatever the body."""

    webhook_id: str
    body: bytes
    variables: dict[str, Any] | BatonError
    signature: str | None = None
    idempotency_key: str | None = None
    # Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature (any given: that form is checked).
    standard: tuple[str | None, str | None, str | None] | None = None


def signature_of(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


_routes, _definitions, _records = WebhookRoute.__table__, Definition.__table__, IdempotencyRecord.__table__
_Route = namedtuple("_Route", "route_id tenant_id secret start_event_id definition_id start_events")
# The route and the latest version of its code, in one statement.
_ROUTE_AND_LATEST = Statement(
    select(_routes.c.id, _routes.c.tenant_id, _routes.c.secret, _routes.c.start_event_id,
           _definitions.c.id.label("definition_id"), _definitions.c.start_events)
    .select_from(_routes.join(_definitions, and_(_definitions.c.tenant_id == _routes.c.tenant_id,
                                                 _definitions.c.code == _routes.c.code)))
    .where(_routes.c.webhook_id == bindparam("webhook_id"))
    .order_by(_definitions.c.version.desc()).limit(1))
_EARLIER = Statement(select(_records.c.id, _records.c.response, _records.c.created_at)
                     .where(_records.c.route_id == bindparam("route_id"), _records.c.key == bindparam("key")))
_FORGET = Statement(delete(_records).where(_records.c.id == bindparam("id")))
_FORGET_EXPIRED = Statement(delete(_records).where(_records.c.created_at < bindparam("cutoff")))
_seen = WebhookMessageId.__table__
_SEEN = Statement(select(_seen.c.id).where(_seen.c.route_id == bindparam("route_id"),
                                           _seen.c.message_id == bindparam("message_id")))
_FORGET_SEEN = Statement(delete(_seen).where(_seen.c.seen_at < bindparam("cutoff")))
_REMEMBER_SEEN = Statement(insert(_seen).values(route_id=bindparam("route_id"), message_id=bindparam("message_id"),
                                                seen_at=bindparam("seen_at")))
_REMEMBER = Statement(insert(_records).values(route_id=bindparam("route_id"), key=bindparam("key"),
                                              response=bindparam("response"), created_at=bindparam("created_at")))


def accept(uow: UnitOfWork, call: WebhookCall) -> dict[str, Any]:
    """Start the latest version of the route's code, or replay the first answer to a known key.

    NotFoundError (unknown route, or its start event gone from the latest version), UnauthorizedError
    (signature), BadRequestError (body, Idempotency-Key); nothing is written then.
    """
    key = call.idempotency_key
    if key is not None and not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise BadRequestError(f"The Idempotency-Key header must be 1 to {MAX_IDEMPOTENCY_KEY} characters.")
    # Without a key the start is one write (the route is read before it): in autocommit on
    # PostgreSQL. A key adds the record of the answer, which must commit with the instance.
    uow.on_driver(single_write=key is None and call.standard is None)
    route = _route(uow, call.webhook_id)
    if key is None:
        return _start(uow, route, call)
    try:
        with uow.savepoint():
            return _start(uow, route, call)
    except (IntegrityError, uow.engine.dialect.loaded_dbapi.IntegrityError):
        pass
    # The same key raced in on another connection and won: answer with its result.
    earlier = _earlier_answer(uow, route.route_id, key)
    if earlier is None:
        raise BatonError()
    return earlier


def _route(uow: UnitOfWork, webhook_id: str) -> _Route:
    if len(webhook_id) > MAX_WEBHOOK_ID or "\x00" in webhook_id:  # no such id can exist
        raise NotFoundError("Unknown webhook.")
    found = uow.rows(_ROUTE_AND_LATEST, {"webhook_id": webhook_id})
    if not found:
        raise NotFoundError("Unknown webhook.")
    return _Route(*found[0])


def _start(uow: UnitOfWork, route: _Route, call: WebhookCall) -> dict[str, Any]:
    if route.secret is not None:
        _check_signature(uow, route, call)
    if isinstance(call.variables, BatonError):
        raise call.variables
    if call.idempotency_key is not None:
        earlier = _earlier_answer(uow, route.route_id, call.idempotency_key)
        if earlier is not None:
            return earlier
    if not any(s["element_id"] == route.start_event_id and s["trigger"] == "webhook" for s in route.start_events):
        raise NotFoundError("This webhook's start event is not in the latest version of its process.")
    instance_id = writes.create_instance(uow, route.tenant_id, route.definition_id, call.variables, START,
                                         {"start_event": route.start_event_id})
    answer = {"instance_id": instance_id, "status": "running", "definition_id": route.definition_id}
    if call.idempotency_key is not None:
        now = utcnow()
        # Keys older than the window are forgotten here, so the table stays as small as a day of calls.
        uow.count(_FORGET_EXPIRED, {"cutoff": now - IDEMPOTENCY_WINDOW})
        uow.count(_REMEMBER, {"route_id": route.route_id, "key": call.idempotency_key, "response": answer,
                              "created_at": now})
    return answer


def _check_signature(uow: UnitOfWork, route: _Route, call: WebhookCall) -> None:
    """The Standard Webhooks form when any of its headers is given (and its id not seen within
    ``SEEN_WINDOW``), else ``X-Baton-Signature``; UnauthorizedError (401) otherwise."""
    if call.standard is None:
        if not (call.signature and hmac.compare_digest(call.signature.strip().lower().encode(),
                                                       signature_of(route.secret, call.body).encode())):
            raise UnauthorizedError("The X-Baton-Signature header is missing or does not match the body.")
        return
    message_id, timestamp, signatures = call.standard
    standard_webhooks.verify(route.secret, message_id, timestamp, signatures, call.body, time.time())
    now = utcnow()
    uow.count(_FORGET_SEEN, {"cutoff": now - SEEN_WINDOW})
    if uow.rows(_SEEN, {"route_id": route.route_id, "message_id": message_id}):
        raise UnauthorizedError("This webhook-id was seen before: a replayed call is refused.")
    try:
        with uow.savepoint():
            uow.count(_REMEMBER_SEEN, {"route_id": route.route_id, "message_id": message_id, "seen_at": now})
    except (IntegrityError, uow.engine.dialect.loaded_dbapi.IntegrityError):
        raise UnauthorizedError("This webhook-id was seen before: a replayed call is refused.") from None


def _earlier_answer(uow: UnitOfWork, route_id: int, key: str) -> dict[str, Any] | None:
    found = uow.rows(_EARLIER, {"route_id": route_id, "key": key})
    if not found:
        return None
    record_id, response, created_at = found[0]
    if created_at < utcnow() - IDEMPOTENCY_WINDOW:
        uow.count(_FORGET, {"id": record_id})
        return None
    return dict(response)


def _route_summary(route: WebhookRoute, public_url: str) -> dict[str, Any]:
    return {"webhook_id": route.webhook_id, "url": webhook_url(public_url, route.webhook_id),
            "code": route.code, "start_event_id": route.start_event_id,
            "has_secret": route.secret is not None, "created_at": iso(route.created_at),
            "rotated_at": iso(route.rotated_at)}


def _tenant_route(uow: UnitOfWork, tenant_id: int, webhook_id: str) -> WebhookRoute:
    route = uow.execute(select(WebhookRoute).where(
        WebhookRoute.tenant_id == tenant_id, WebhookRoute.webhook_id == webhook_id)).scalar_one_or_none()
    if route is None:
        raise NotFoundError(f"Webhook {webhook_id!r} not found.")
    return route


def list_routes(uow: UnitOfWork, tenant_id: int, public_url: str, *, page: int, per_page: int) -> dict[str, Any]:
    return page_of(uow, select(WebhookRoute).where(WebhookRoute.tenant_id == tenant_id), WebhookRoute.id,
                   page=page, per_page=per_page, scalars=True, item=lambda r: _route_summary(r, public_url))


def rotate(uow: UnitOfWork, tenant_id: int, webhook_id: str, public_url: str) -> dict[str, Any]:
    route = _tenant_route(uow, tenant_id, webhook_id)
    route.webhook_id = new_webhook_id()
    route.rotated_at = utcnow()
    return _route_summary(route, public_url)


def set_secret(uow: UnitOfWork, tenant_id: int, webhook_id: str, secret: str | None, public_url: str) -> dict[str, Any]:
    if secret is not None and not 16 <= len(secret) <= 255:
        raise InvalidParamsError("Parameter 'secret' must be 16 to 255 characters, or null to remove it.")
    route = _tenant_route(uow, tenant_id, webhook_id)
    route.secret = secret
    return _route_summary(route, public_url)
