"""Timer start events: a definition's schedule, kept as delayed jobs.

BPMN starts a new instance each time a timer start event fires. Deploying a definition with one
schedules a ``timer_start`` job at the first due time (and drops the schedule of the code's older
versions); when it runs, it starts an instance (the parser turned the timer start into a plain
start event, so the instance runs at once) and, for a
``timeCycle``, schedules the next run from the previous due time (so the schedule never drifts).
"""
from __future__ import annotations

import ast
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

from SpiffWorkflow.bpmn.specs.event_definitions.timer import TimerEventDefinition
from sqlalchemy import delete, select

from bpmn import cron_next_after
from engine import jobs
from engine.jobs.kinds import START, TIMER_START
from engine.store import workflows, writes
from engine.errors import BpmnValidationError
from engine.store.db import utcnow
from engine.store.models import Definition, Job
from engine.store.unit_of_work import UnitOfWork

log = logging.getLogger("baton.timer_starts")


def _naive_utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value


def first_run(kind: str, expression: str) -> tuple[datetime, int, float]:
    """(first due time, runs left including the first, seconds between runs) of a timer start.

    Raises ValueError with a sentence when the timer cannot be scheduled.
    """
    try:
        value = ast.literal_eval(expression)
    except (ValueError, SyntaxError):
        raise ValueError("A timer start event needs a literal value (a date, duration or cycle), "
                         "not an expression: no instance variables exist before it starts.") from None
    if not isinstance(value, str):
        raise ValueError("A timer start event's value must be text such as PT5M or 2026-12-01T10:00:00Z.")
    now = datetime.now(timezone.utc)
    if kind == "cron":  # a Camunda cron cycle: repeats for as long as the definition is the latest
        due = cron_next_after(value, now)
        if due is None:
            raise ValueError(f"The cron timeCycle '{value}' never fires again.")
        return _naive_utc(due), -1, 0.0
    if kind == "timeDate":
        return _naive_utc(TimerEventDefinition.get_datetime(value)), 1, 0.0
    if kind == "timeDuration":
        duration = TimerEventDefinition.get_timedelta_from_start(TimerEventDefinition.parse_iso_duration(value), now)
        return _naive_utc(now + duration), 1, 0.0
    cycles, start, interval = TimerEventDefinition.parse_iso_recurring_interval(value)
    if cycles is None or cycles < 1:
        raise ValueError("A timeCycle start needs a finite number of repetitions, such as R3/PT1H.")
    return _naive_utc(start or now), cycles, interval.total_seconds()


def schedule(uow: UnitOfWork, definition: Definition, timer_starts: list) -> None:
    """Replace the code's schedule by this definition's (inside the deploy transaction)."""
    old = uow.execute(select(Job).where(Job.tenant_id == definition.tenant_id, Job.kind == TIMER_START)).scalars()
    stale = [job.id for job in old if job.payload.get("code") == definition.code]
    if stale:
        uow.execute(delete(Job).where(Job.id.in_(stale)))
    errors = []
    for timer in timer_starts:
        try:
            due, runs, interval = first_run(timer.kind, timer.expression)
        except ValueError as exc:
            errors.append({"element_id": timer.element_id, "line": timer.line, "message": str(exc)})
            continue
        jobs.enqueue(uow, definition.tenant_id, TIMER_START, run_at=due, payload={
            "definition_id": definition.id, "code": definition.code, "element_id": timer.element_id,
            "runs_left": runs, "interval_s": interval, "due": due.isoformat(),
            **({"cron": ast.literal_eval(timer.expression)} if timer.kind == "cron" else {})})
    if errors:
        raise BpmnValidationError(errors)


class TimerStartRunner:
    """Job handler for ``timer_start`` jobs."""

    def handle(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        payload: dict[str, Any] = job.payload
        if workflows.latest_definition_id(uow, job.tenant_id, payload["code"], missing=None) == payload["definition_id"]:
            # The parser made the timer start a plain start event: the new instance runs at once.
            writes.create_instance(uow, job.tenant_id, payload["definition_id"], {}, START,
                                   {"start_event": payload["element_id"]})
            _schedule_next(uow, job.tenant_id, payload)
        jobs.finish(uow, job, worker_id)

    def give_up(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        """This firing kept failing for an internal reason: it is skipped, the schedule goes on."""
        log.error("timer start %s of %s: skipped after repeated internal errors", job.payload.get("element_id"),
                  job.payload.get("code"))
        _schedule_next(uow, job.tenant_id, job.payload)
        jobs.finish(uow, job, worker_id)


def _schedule_next(uow: UnitOfWork, tenant_id: int, payload: dict[str, Any]) -> None:
    """A cycle's next run, from the previous due time (no drift); nothing after the last one."""
    if payload.get("cron"):
        due = cron_next_after(payload["cron"], datetime.fromisoformat(payload["due"]).replace(tzinfo=timezone.utc))
        if due is not None:
            due = _naive_utc(due)
            jobs.enqueue(uow, tenant_id, TIMER_START, run_at=max(due, utcnow()), payload={**payload, "due": due.isoformat()})
        return
    if payload["runs_left"] > 1:
        due = datetime.fromisoformat(payload["due"]) + timedelta(seconds=payload["interval_s"])
        jobs.enqueue(uow, tenant_id, TIMER_START, run_at=max(due, utcnow()), payload={
            **payload, "runs_left": payload["runs_left"] - 1, "due": due.isoformat()})
