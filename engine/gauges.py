"""Gauges read from the database when ``/metrics`` is scraped: the job queue (in all, and by kind:
depth and the age of the oldest due job), instances by status, dead deliveries, active AI dialogs.

They describe the shared database, so every process answers the same; counters of events are in
``engine.telemetry.metrics``. Each scrape runs four grouped counts (index scans of the instances'
and deliveries' status indexes, and of the job queue, which holds only pending work).
"""
from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import func, or_, select

from engine.store.db import utcnow
from engine.store.models import AiDialog, Delivery, Instance, Job
from engine.store.unit_of_work import UnitOfWork


class DatabaseGauges:
    """A prometheus_client collector (``collect``), reading in the scraping request's unit of work."""

    def __init__(self, uow: UnitOfWork):
        self.uow = uow

    def describe(self):
        return []  # read only when scraped: registering must not query the database

    def collect(self):
        now, uow = utcnow(), self.uow
        free = or_(Job.locked_until.is_(None), Job.locked_until < now)
        try:
            pending, due, running = uow.execute(select(
                func.count(),
                func.count().filter(Job.run_at <= now, free),
                func.count().filter(Job.locked_until >= now))).one()
            by_kind = uow.execute(
                select(Job.kind, func.count(), func.min(Job.run_at))
                .where(Job.run_at <= now, free).group_by(Job.kind)).all()
            instances = uow.execute(select(Instance.status, func.count()).group_by(Instance.status)).all()
            dead = uow.execute(select(func.count()).select_from(Delivery)
                                      .where(Delivery.status == "dead")).scalar_one()
            talking = uow.execute(select(func.count()).select_from(AiDialog)
                                         .where(AiDialog.status == "active")).scalar_one()
        finally:
            uow.end_read()
        yield _gauge("baton_jobs_pending", "Jobs waiting or running (delayed and held ones included).", pending)
        yield _gauge("baton_jobs_due", "Jobs due now that no worker holds yet.", due)
        yield _gauge("baton_jobs_running", "Jobs a worker holds right now.", running)
        depth = GaugeMetricFamily("baton_job_queue_depth", "Jobs due now that no worker holds yet, by kind.",
                                  labels=["kind"])
        oldest = GaugeMetricFamily("baton_job_oldest_due_age_seconds",
                                   "How long the oldest due job no worker holds has been due, by kind.", labels=["kind"])
        for kind, count, first_due in by_kind:
            depth.add_metric([kind], count)
            oldest.add_metric([kind], max(0.0, (now - first_due).total_seconds()))
        yield depth
        yield oldest
        statuses = GaugeMetricFamily("baton_instances", "Process instances by status.", labels=["status"])
        for status, count in instances:
            statuses.add_metric([status], count)
        yield statuses
        yield _gauge("baton_deliveries_dead", "Deliveries that are dead now (not yet re-sent with delivery.retry).",
                     dead)
        yield _gauge("baton_ai_dialogs_active", "AI chat steps holding a dialog.", talking)


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)
