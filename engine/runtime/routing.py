"""Messages and signals between instances: which instances a message or signal reaches, which
processes it starts, and what becomes of a message that reaches nobody.

``deliver`` works inside its caller's unit of work (``message.correlate``, ``signal.broadcast``,
and the ``thrown`` job that carries what an advance threw, committed with the thrower's state, so
a ``kill -9`` loses nothing). The instances waiting for a name are found by their event
subscriptions (``engine.runtime.subscription_rows``).

* A **message** goes to the running instances waiting for its name whose correlation matches:
  each key it carries must equal the instance's value for it, its correlation property's value,
  else its variable of that name. Each reached instance's waiting element is claimed (as
  ``process.message`` does) and a ``message`` job delivers it. Only when no instance is waiting,
  the message starts each process (the latest version of each code) whose message start event
  has that name.
* A **signal** goes to every running instance waiting for its name and starts every process whose
  signal start event has it.
* A thrown message that reached nobody fails its thrower at the throwing element (where it stands
  now, as an internal failure does), unless the element says ``undelivered = drop``.
"""
from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import func, select, update

from engine import jobs
from engine.chat import outbox as chat_outbox
from engine.errors import ConflictError
from engine.jobs import kinds
from engine.store import history, workflows, writes
from engine.store.db import utcnow
from engine.store.models import Definition, EventSubscription, Instance
from engine.store.unit_of_work import UnitOfWork
from engine.telemetry import metrics

log = logging.getLogger("baton.routing")

QUEUED = "message_queued"  # a waiting_for entry already claimed by an accepted message
_CLAIM_TRIES = 5


class ThrownEvents:
    """Contributor (``engine.runtime.advance``): what an advance threw for other instances, carried
    by a ``thrown`` job committed with the state that threw it (a ``kill -9`` loses nothing)."""

    def contribute(self, advance):
        thrown = advance.outcome.thrown
        if not thrown:
            return None
        return lambda uow: jobs.enqueue(uow, advance.job.tenant_id, kinds.THROWN, payload={
            "instance_id": advance.instance_id, "events": thrown})


def deliver(uow: UnitOfWork, tenant_id: int, kind: str, name: str, variables: dict[str, Any], correlation: dict[str, Any], *,
            exclude: int | None = None, single: bool = False) -> dict[str, list[int]]:
    """Deliver in the caller's transaction: ``{"reached": [instance ids], "started": [instance ids]}``.
    ``single``: a message may reach one instance only (ConflictError when several match)."""
    waiting = _waiting(uow, tenant_id, kind, name, correlation if kind == "message" else {}, exclude)
    if single and len(waiting) > 1:
        shown = ", ".join(str(i) for i in list(waiting)[:10])
        raise ConflictError(f"The message '{name}' matches {len(waiting)} waiting instances ({shown}); give "
                            "correlation values that single one out, or all: true.",
                            data={"instance_ids": list(waiting)[:100]})
    reached = []
    detail = {kind: name, **({"from_instance": exclude} if exclude is not None else {})}
    for instance_id, element_ids in waiting.items():
        if kind == "signal":
            jobs.enqueue(uow, tenant_id, kinds.SIGNAL, instance_id=instance_id,
                         payload={"signal": name, "variables": variables})
            reached.append(instance_id)
        elif _claim(uow, instance_id, name, element_ids):
            jobs.enqueue(uow, tenant_id, kinds.MESSAGE, instance_id=instance_id,
                         payload={"message": name, "variables": variables, "correlation": correlation})
            reached.append(instance_id)
        else:
            continue
        history.record(uow, tenant_id=tenant_id, instance_id=instance_id, kind=f"{kind}_received",
                       element_id=element_ids[0] if len(element_ids) == 1 else None, detail=detail)
    started = _start(uow, tenant_id, kind, name, variables, correlation, reached) \
        if kind == "signal" or not reached else []
    return {"reached": reached, "started": started}


def _waiting(uow: UnitOfWork, tenant_id: int, kind: str, name: str, correlation: dict[str, Any],
             exclude: int | None) -> dict[int, list[str]]:
    """The running instances waiting for ``name`` whose correlation matches: {id: element ids}."""
    rows = uow.execute(
        select(EventSubscription.instance_id, EventSubscription.element_id, EventSubscription.correlation,
               Instance.variables)
        .join(Instance, Instance.id == EventSubscription.instance_id)
        .where(EventSubscription.tenant_id == tenant_id, EventSubscription.kind == kind,
               EventSubscription.name == name, Instance.status == "running")
        .order_by(EventSubscription.instance_id, EventSubscription.id)).all()
    found: dict[int, list[str]] = {}
    for instance_id, element_id, awaited, variables in rows:
        if instance_id != exclude and matches(correlation, awaited or {}, variables or {}):
            found.setdefault(instance_id, []).append(element_id)
    return found


def matches(correlation: dict[str, Any], awaited: dict[str, Any], variables: dict[str, Any]) -> bool:
    """Each key of ``correlation`` equals the instance's value for it: the correlation property's
    value it waits with, else its variable of that name (a key it has neither of: no match)."""
    for key, value in correlation.items():
        if key in awaited:
            mine = awaited[key]
        elif key in variables:
            mine = variables[key]
        else:
            return False
        if mine != value:
            return False
    return True


def _claim(uow: UnitOfWork, instance_id: int, name: str, element_ids: list[str]) -> bool:
    """Mark the instance's waiting element as taken by this message (compare-and-swap on the
    revision, as ``process.message`` does), so that a second message before this one is applied
    is not accepted and then dropped; False when it no longer waits for ``name``."""
    for _ in range(_CLAIM_TRIES):
        row = uow.execute(select(Instance.revision, Instance.waiting_for, Instance.status)
                                 .where(Instance.id == instance_id)).one_or_none()
        if row is None or row.status != "running":
            return False
        entries = [dict(entry) for entry in row.waiting_for or []]
        entry = next((e for e in entries if not e.get(QUEUED) and e.get("element_id") in element_ids
                      and (e.get("message") == name or name in e.get("messages", []))), None)
        if entry is None:
            return False
        entry[QUEUED] = True
        if uow.execute(update(Instance).where(Instance.id == instance_id, Instance.revision == row.revision)
                              .values(waiting_for=entries, revision=Instance.revision + 1)).rowcount == 1:
            return True
    raise ConflictError(f"Instance {instance_id} kept changing while the message '{name}' arrived; send it again.")


def _start(uow: UnitOfWork, tenant_id: int, kind: str, name: str, variables: dict[str, Any], correlation: dict[str, Any],
           reached: list[int]) -> list[int]:
    """Start the latest version of each code whose message (signal) start event has ``name``, a
    multiple start event's parts included. A parallel multiple start event an instance of that
    definition already waits at (``reached``) gets the signal there, and starts no second one."""
    latest = select(func.max(Definition.id)).where(Definition.tenant_id == tenant_id).group_by(Definition.code)
    rows = uow.execute(select(Definition.id, Definition.start_events)
                              .where(Definition.id.in_(latest)).order_by(Definition.id)).all()
    started, waiting_in = [], None
    for definition_id, start_events in rows:
        for start in start_events or []:
            if start.get("trigger") == "multiple" and name in start.get(f"{kind}s", []) and start.get("parallel"):
                if waiting_in is None:
                    waiting_in = set(uow.execute(select(Instance.definition_id).where(Instance.id.in_(reached)))
                                     .scalars()) if reached else set()
                if definition_id in waiting_in:
                    break
            if (start.get("trigger") == kind and start.get(kind) == name) or \
                    (start.get("trigger") == "multiple" and name in start.get(f"{kind}s", [])):
                trigger = {"kind": kind, "name": name, "variables": variables, "correlation": correlation}
                started.append(writes.create_instance(uow, tenant_id, definition_id,
                                                      dict(variables), kinds.START,
                                                      {"start_event": start["element_id"], "trigger": trigger}))
                break
    return started


class ThrownRunner:
    """Job handler for ``thrown`` jobs: what one advance of an instance threw, delivered in order."""

    def handle(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        thrower = job.payload["instance_id"]
        for event in job.payload["events"]:
            result = deliver(uow, job.tenant_id, event["kind"], event["name"], event.get("variables") or {},
                             event.get("correlation") or {}, exclude=thrower)
            if event["kind"] == "message" and not result["reached"] and not result["started"]:
                _undelivered(uow, job.tenant_id, thrower, event)
        jobs.finish(uow, job, worker_id)

    def give_up(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        """Delivering kept failing for a reason of ours: the job is kept aside (never dropped)."""
        log.error("thrown events of instance %s: delivery kept failing; job %s held", job.payload.get("instance_id"),
                  job.id)
        jobs.hold(uow, job, worker_id, "held: delivering these messages kept failing")


def _undelivered(uow: UnitOfWork, tenant_id: int, thrower: int, event: dict[str, Any]) -> None:
    name, element_id = event["name"], event.get("element_id")
    correlation = event.get("correlation") or {}
    said = f" with the correlation {correlation}" if correlation else ""
    if event.get("undelivered") == "drop":
        log.info("message %r thrown by instance %s at %s reached nobody; dropped as the model says", name, thrower,
                 element_id)
        return
    message = (f"The message '{name}' thrown at '{element_id}'{said} reached no waiting instance and started no "
               "process; deploy its receiver, or give the element the property undelivered = drop.")
    # Failed where it stands, as an internal failure is (Runner.give_up): it has moved on since the
    # throw (an advance under way loses its compare-and-swap); one that completed meanwhile did not
    # complete as modelled. process.retry resumes it where it waits.
    was, definition_id = uow.execute(select(Instance.status, Instance.definition_id)
                                            .where(Instance.id == thrower)).one_or_none() or (None, None)
    failed = uow.execute(
        update(Instance).where(Instance.id == thrower, Instance.status.in_(("running", "completed")))
        .values(status="failed", completed_at=func.coalesce(Instance.completed_at, utcnow()),
                revision=Instance.revision + 1, error={"message": message, "element_id": element_id}))
    if failed.rowcount:
        history.record(uow, tenant_id=tenant_id, instance_id=thrower, kind="failed", element_id=element_id,
                       detail={"message": message})
    if failed.rowcount and was == "running":
        chat_outbox.close_for_instance(uow, thrower)
        code = workflows.definition_code(uow, definition_id)
        uow.after_commit(lambda: metrics.INSTANCES_ENDED.labels(code, "failed").inc())
