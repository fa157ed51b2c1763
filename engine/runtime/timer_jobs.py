"""An instance's timer job, written with the instance state (a contributor to each advance,
``TimerJobs``): one ``timer`` job, due at the earliest timer the instance waits on; the job of a
timer it no longer waits on goes with the save that moved it on.
"""
from __future__ import annotations

from sqlalchemy import bindparam, delete

from engine import jobs
from engine.jobs import kinds
from engine.store.models import Job

_jobs = Job.__table__
_DROP_TIMERS = delete(_jobs).where(_jobs.c.instance_id == bindparam("instance_id"), _jobs.c.kind == kinds.TIMER,
                                   _jobs.c.id != bindparam("job_id"))


class TimerJobs:
    """Contributor (``engine.runtime.advance``)."""

    def contribute(self, advance):
        job, outcome = advance.job, advance.outcome
        was_waiting = any("due_at" in entry for entry in advance.row.waiting_for or [])
        next_at = outcome.next_timer_at if advance.running else None
        if not was_waiting and next_at is None:
            return None

        def write(uow) -> None:
            if was_waiting:
                uow.run(_DROP_TIMERS, {"instance_id": job.instance_id, "job_id": job.id})
            if next_at is not None:
                jobs.enqueue(uow, job.tenant_id, kinds.TIMER, instance_id=job.instance_id, run_at=next_at)
        return write
