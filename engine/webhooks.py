"""Webhook starts: the secret route id, the optional inbound signature, idempotency keys."""
from __future__ import annotations

import hashlib
import hmac
import logging
from collections import Counter, namedtuple
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, bindparam, delete, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from engine import instances, jobs
from engine.db import DriverStatement, db, iso, sqlite_write, utcnow
from engine.definitions import new_webhook_id, webhook_url
from engine.errors import BadRequestError, InvalidParamsError, NotFoundError, UnauthorizedError
from engine.models import Definition, IdempotencyRecord, WebhookRoute
from engine.paging import page_of
from engine.runner import START

log = logging.getLogger("baton.webhooks")

IDEMPOTENCY_WINDOW = timedelta(hours=24)


def signature_of(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def find_route(webhook_id: str) -> WebhookRoute:
    route = db.session.execute(
        select(WebhookRoute).where(WebhookRoute.webhook_id == webhook_id)).scalar_one_or_none()
    if route is None:
        raise NotFoundError("Unknown webhook.")
    return route


def verify_signature(route: WebhookRoute, body: bytes, signature: str | None) -> None:
    if route.secret is None:
        return
    if not signature or not hmac.compare_digest(signature.strip().lower().encode(),
                                                signature_of(route.secret, body).encode()):
        raise UnauthorizedError("The X-Baton-Signature header is missing or does not match the body.")


def start_from_webhook(route: WebhookRoute, variables: dict[str, Any],
                       idempotency_key: str | None) -> dict[str, Any]:
    """Start the latest version of the route's code; replay the first answer for a known key."""
    if idempotency_key is not None:
        if not 1 <= len(idempotency_key) <= 255:
            raise BadRequestError("The Idempotency-Key header must be 1 to 255 characters.")
        earlier = _earlier_answer(route.id, idempotency_key)
        if earlier is not None:
            return earlier
    definition = instances.resolve_definition(route.tenant_id, route.code)
    if not any(s["element_id"] == route.start_event_id and s["trigger"] == "webhook"
               for s in definition.start_events):
        raise NotFoundError("This webhook's start event is not in the latest version of its process.")
    answer = instances.start(route.tenant_id, definition, variables, commit=False)
    if idempotency_key is None:
        db.session.commit()
        return answer
    # Keys older than the window are forgotten here, so the table stays as small as a day of calls.
    db.session.execute(delete(IdempotencyRecord).where(IdempotencyRecord.created_at < utcnow() - IDEMPOTENCY_WINDOW))
    db.session.add(IdempotencyRecord(route_id=route.id, key=idempotency_key, response=answer))
    try:
        db.session.commit()
    except IntegrityError:  # the same key raced in: the first one won, answer with its result
        db.session.rollback()
        return _earlier_answer(route.id, idempotency_key)
    return answer


_routes, _definitions = WebhookRoute.__table__, Definition.__table__
# The route and the latest version of its code in one statement (what find_route and
# resolve_definition read, in two ORM queries, on the full path).
_ROUTE_AND_LATEST = (
    select(_routes.c.tenant_id, _routes.c.secret, _routes.c.start_event_id,
           _definitions.c.id.label("definition_id"), _definitions.c.start_events)
    .select_from(_routes.join(_definitions, and_(_definitions.c.tenant_id == _routes.c.tenant_id,
                                                 _definitions.c.code == _routes.c.code)))
    .where(_routes.c.webhook_id == bindparam("webhook_id"))
    .order_by(_definitions.c.version.desc()).limit(1))
_NOTIFY = text(f"SELECT pg_notify('{jobs.NOTIFY_CHANNEL}', '{START}')")


def start_plain(engine: Engine, webhook_id: str, variables: dict[str, Any]) -> dict[str, Any] | None:
    """The common webhook start (no secret, no idempotency key) in one short transaction on a
    plain connection: one read for the route and its latest definition, the instance row and its
    start job, commit. Same rows and answer as ``start_from_webhook``.

    None when the call is not the common case (unknown route, a route with a secret, the start
    event gone from the latest version): nothing was written and the full path answers it.
    """
    if engine.dialect.name == "sqlite":
        answer = _start_plain_sqlite(engine, webhook_id, variables)
    else:
        answer = _start_plain_core(engine, webhook_id, variables)
    if answer is None:
        return None
    try:
        jobs.wake_local(Counter({START: 1}))
    except Exception:  # the start is committed; a worker finds it at its next look
        log.exception("waking the workers failed")
    return answer


def _route_accepts(row) -> bool:
    return row is not None and row.secret is None and any(
        s["element_id"] == row.start_event_id and s["trigger"] == "webhook" for s in row.start_events)


_ROUTE_AND_LATEST_DRIVER = DriverStatement(_ROUTE_AND_LATEST)
_INSERT_INSTANCE_DRIVER = DriverStatement(instances._INSERT)
_INSERT_JOB_DRIVER = DriverStatement(jobs._INSERT)


class _NotPlain(Exception):
    """The call is not the common case: roll back (nothing was written) and let the full path answer."""


def _start_plain_sqlite(engine: Engine, webhook_id: str, variables: dict[str, Any]) -> dict[str, Any] | None:
    """``start_plain`` on SQLite: the same statements, on the driver connection (``sqlite_write``),
    without SQLAlchemy's per-statement and per-transaction machinery (half the accept's CPU)."""
    dialect = engine.dialect
    try:
        with sqlite_write(engine) as connection:
            found = _ROUTE_AND_LATEST_DRIVER.execute(connection, dialect, {"webhook_id": webhook_id})
            row = _Route(*found[0]) if found else None
            if not _route_accepts(row):
                raise _NotPlain()
            [(instance_id,)] = _INSERT_INSTANCE_DRIVER.execute(connection, dialect, {
                "tenant_id": row.tenant_id, "definition_id": row.definition_id, "variables": variables})
            _INSERT_JOB_DRIVER.execute(connection, dialect, {
                "tenant_id": row.tenant_id, "instance_id": instance_id, "kind": START,
                "payload": {"variables": variables}, "run_at": utcnow()})
    except _NotPlain:
        return None
    return {"instance_id": instance_id, "status": "running", "definition_id": row.definition_id}


_Route = namedtuple("_Route", "tenant_id secret start_event_id definition_id start_events")


def _start_plain_core(engine: Engine, webhook_id: str, variables: dict[str, Any]) -> dict[str, Any] | None:
    with engine.connect() as connection:
        row = connection.execute(_ROUTE_AND_LATEST, {"webhook_id": webhook_id}).first()
        if not _route_accepts(row):
            connection.rollback()
            return None
        instance_id = connection.execute(instances._INSERT, {
            "tenant_id": row.tenant_id, "definition_id": row.definition_id, "variables": variables}).scalar_one()
        connection.execute(jobs._INSERT, {
            "tenant_id": row.tenant_id, "instance_id": instance_id, "kind": START,
            "payload": {"variables": variables}, "run_at": utcnow()})
        if connection.dialect.name == "postgresql":
            connection.execute(_NOTIFY)
        connection.commit()
    return {"instance_id": instance_id, "status": "running", "definition_id": row.definition_id}


def _earlier_answer(route_id: int, key: str) -> dict[str, Any] | None:
    cutoff = utcnow() - IDEMPOTENCY_WINDOW
    record = db.session.execute(select(IdempotencyRecord).where(
        IdempotencyRecord.route_id == route_id, IdempotencyRecord.key == key)).scalar_one_or_none()
    if record is None:
        return None
    if record.created_at < cutoff:
        db.session.execute(delete(IdempotencyRecord).where(IdempotencyRecord.id == record.id))
        db.session.flush()
        return None
    return dict(record.response)


def _route_summary(route: WebhookRoute, public_url: str) -> dict[str, Any]:
    return {"webhook_id": route.webhook_id, "url": webhook_url(public_url, route.webhook_id),
            "code": route.code, "start_event_id": route.start_event_id,
            "has_secret": route.secret is not None, "created_at": iso(route.created_at),
            "rotated_at": iso(route.rotated_at)}


def _tenant_route(tenant_id: int, webhook_id: str) -> WebhookRoute:
    route = db.session.execute(select(WebhookRoute).where(
        WebhookRoute.tenant_id == tenant_id, WebhookRoute.webhook_id == webhook_id)).scalar_one_or_none()
    if route is None:
        raise NotFoundError(f"Webhook {webhook_id!r} not found.")
    return route


def list_routes(tenant_id: int, public_url: str, *, page: int, per_page: int) -> dict[str, Any]:
    return page_of(select(WebhookRoute).where(WebhookRoute.tenant_id == tenant_id), WebhookRoute.id,
                   page=page, per_page=per_page, scalars=True, item=lambda r: _route_summary(r, public_url))


def rotate(tenant_id: int, webhook_id: str, public_url: str) -> dict[str, Any]:
    route = _tenant_route(tenant_id, webhook_id)
    route.webhook_id = new_webhook_id()
    route.rotated_at = utcnow()
    db.session.commit()
    return _route_summary(route, public_url)


def set_secret(tenant_id: int, webhook_id: str, secret: str | None, public_url: str) -> dict[str, Any]:
    if secret is not None and not 16 <= len(secret) <= 255:
        raise InvalidParamsError("Parameter 'secret' must be 16 to 255 characters, or null to remove it.")
    route = _tenant_route(tenant_id, webhook_id)
    route.secret = secret
    db.session.commit()
    return _route_summary(route, public_url)
