"""Event-subscription rows, written with the instance state: one per message or signal name a
running instance waits for, with the correlation values it would match. They are what
``engine.runtime.routing`` reads to find the instances a message or signal is for; an advance
rewrites an instance's rows only when what it waits for changed.
"""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy import delete, insert

from engine.store.db import db, utcnow
from engine.store.models import EventSubscription

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


def sync(tenant_id: int, instance_id: int, waiting_for: list[dict[str, Any]] | None) -> None:
    """In the runner's save transaction: the instance's rows become those of ``waiting_for``
    (None or empty: the instance waits for no message or signal, or it ended)."""
    db.session.execute(delete(EventSubscription).where(EventSubscription.instance_id == instance_id))
    rows = [{"tenant_id": tenant_id, "instance_id": instance_id, "kind": kind, "name": name, "element_id": element_id,
             "correlation": json.loads(correlation), "created_at": utcnow()}
            for kind, name, element_id, correlation in sorted(of(waiting_for))]
    if rows:
        db.session.execute(insert(EventSubscription), rows)


def drop(instance_id: int) -> None:
    """The instance was cancelled: it waits for nothing any more."""
    db.session.execute(delete(EventSubscription).where(EventSubscription.instance_id == instance_id))
