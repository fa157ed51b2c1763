"""Gauges read from the database when ``/metrics`` is scraped: the job queue (in all, and by kind:
depth and the age of the oldest due job), instances by status, dead deliveries, active AI dialogs,
open and overdue human tasks per tenant.

They describe the shared database, so every process answers the same; counters of events are in
``engine.telemetry.metrics``. Each scrape runs six grouped counts (index scans of the instances'
and deliveries' status indexes, of the job queue, which holds only pending work, of the task
counters, and of the range of open tasks already due).
"""
from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import func, or_, select

from engine.store.db import utcnow
from engine.store.models import AiDialog, Delivery, Instance, Job, Task, TaskCount, Tenant
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
            # Open tasks from the task counters (a few rows per tenant); overdue ones from the
            # (tenant, status, due) index, whose range holds only open tasks already due.
            open_tasks = uow.execute(
                select(Tenant.name, func.sum(TaskCount.tasks)).join(Tenant, Tenant.id == TaskCount.tenant_id)
                .where(TaskCount.status == "in_progress").group_by(Tenant.name)).all()
            overdue = dict(uow.execute(
                select(Tenant.name, func.count()).select_from(Task).join(Tenant, Tenant.id == Task.tenant_id)
                .where(Task.status == "in_progress", Task.due_order < now).group_by(Tenant.name)).all())
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
        tasks_open = GaugeMetricFamily("baton_tasks_open", "Human tasks waiting for a person, by tenant.",
                                       labels=["tenant"])
        tasks_overdue = GaugeMetricFamily("baton_tasks_overdue", "Open human tasks past their due date, by tenant.",
                                          labels=["tenant"])
        for tenant, count in open_tasks:
            tasks_open.add_metric([tenant], int(count or 0))
            tasks_overdue.add_metric([tenant], overdue.get(tenant, 0))
        yield tasks_open
        yield tasks_overdue


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)
