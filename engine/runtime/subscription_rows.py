"""Event-subscription rows, written with the instance state (a contributor to each advance,
``SubscriptionRows``): one per message or signal name a
running instance waits for, with the correlation values it would match. They are what
``engine.runtime.routing`` reads to find the instances a message or signal is for; an advance
rewrites an instance's rows only when what it waits for changed.
"""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy import delete, insert

from engine.store.db import utcnow
from engine.store.models import EventSubscription
from engine.store.unit_of_work import UnitOfWork

Subscription = tuple[str, str, str, str]  # kind, name, element_id, correlation as canonical JSON


def of(waiting_for: list[dict[str, Any]] | None) -> set[Subscription]:
    """The subscriptions a ``waiting_for`` list stands for (an event-based gateway waits for several)."""
    found = set()
    for entry in waiting_for or []:
        correlation = json.dumps(entry.get("correlation") or {}, sort_keys=True, default=str)
        for kind in ("message", "signal"):
            for name in entry.get(f"{kind}s") or ([entry[kind]] if entry.get(kind) else []):
                found.add((kind, name, entry["element_id"], correlation))
    return found


def changed(before: list[dict[str, Any]] | None, after: list[dict[str, Any]] | None) -> bool:
    return of(before) != of(after)


class SubscriptionRows:
    """Contributor (``engine.runtime.advance``): rewritten when what the instance waits for changed."""

    def contribute(self, advance):
        waiting_for = advance.outcome.waiting_for if advance.running else []
        if not changed(advance.row.waiting_for, waiting_for):
            return None
        return lambda uow: sync(uow, advance.tenant_id, advance.instance_id, waiting_for)


def sync(uow: UnitOfWork, tenant_id: int, instance_id: int, waiting_for: list[dict[str, Any]] | None) -> None:
    """In the runner's save transaction: the instance's rows become those of ``waiting_for``
    (None or empty: the instance waits for no message or signal, or it ended)."""
    uow.execute(delete(EventSubscription).where(EventSubscription.instance_id == instance_id))
    rows = [{"tenant_id": tenant_id, "instance_id": instance_id, "kind": kind, "name": name, "element_id": element_id,
             "correlation": json.loads(correlation), "created_at": utcnow()}
            for kind, name, element_id, correlation in sorted(of(waiting_for))]
    if rows:
        uow.execute(insert(EventSubscription), rows)


def drop(uow: UnitOfWork, instance_id: int) -> None:
    """The instance was cancelled: it waits for nothing any more."""
    uow.execute(delete(EventSubscription).where(EventSubscription.instance_id == instance_id))
