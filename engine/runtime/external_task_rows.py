"""External-task rows, written with the instance state (a contributor to each advance,
``ExternalTaskRows``): opened when an external task starts waiting
for a worker, cancelled when it no longer waits (a boundary event took the path, the instance
ended), opened again when a retried instance waits there again. What workers do with them is
``engine.external_tasks``.
"""
from __future__ import annotations

from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from sqlalchemy import insert, select, update

from bpmn import any_task_spec, is_external_task, waiting_external_tasks
from engine.jobs.kinds import REPAIR
from engine.jobs.wakers import EXTERNAL_TASKS
from engine.store.db import utcnow
from engine.store.models import ExternalTaskRow
from engine.store.unit_of_work import UnitOfWork

_FREED = {"worker_id": None, "lock_expires_at": None}


def may_have_external_tasks(specs: tuple) -> bool:
    """Whether external-task rows can exist for this process at all (else the save skips the sync)."""
    return any_task_spec(is_external_task, *specs)


class ExternalTaskRows:
    """Contributor (``engine.runtime.advance``): the external-task rows of a process that has any."""

    def contribute(self, advance):
        if not may_have_external_tasks(advance.specs):
            return None
        workflow = advance.outcome.workflow if advance.running else None
        reopen = ("cancelled", "completed") if advance.job.kind == REPAIR else ("cancelled",)
        return lambda uow: sync(uow, advance.tenant_id, advance.instance_id, advance.row.definition_id, workflow,
                                reopen=reopen)


def sync(uow: UnitOfWork, tenant_id: int, instance_id: int, definition_id: int, workflow: BpmnWorkflow | None, *,
         reopen: tuple[str, ...] = ("cancelled",)) -> None:
    """In the runner's save transaction: a row for every external task that waits for a worker;
    open rows whose task no longer waits are cancelled (``workflow`` None: the instance ended).
    A row a worker has completed stays completed while its result is on its way to the instance;
    one in a ``reopen`` status whose task waits again is open again (after ``process.retry``: a
    cancelled one; after ``process.rewind``: a completed one too)."""
    waiting = {entry["spiff_task_id"]: entry for entry in waiting_external_tasks(workflow)} if workflow else {}
    known = dict(uow.execute(
        select(ExternalTaskRow.spiff_task_id, ExternalTaskRow.status).where(ExternalTaskRow.instance_id == instance_id)).all())
    gone = [spiff_id for spiff_id, status in known.items() if status == "open" and spiff_id not in waiting]
    if gone:
        uow.execute(update(ExternalTaskRow).where(ExternalTaskRow.instance_id == instance_id,
                                                      ExternalTaskRow.spiff_task_id.in_(gone))
                           .values(status="cancelled", completed_at=utcnow(), **_FREED))
    reopened = [spiff_id for spiff_id in waiting if known.get(spiff_id) in reopen]
    for spiff_id in reopened:  # waiting again after process.retry: a fresh start for the workers
        uow.execute(update(ExternalTaskRow).where(ExternalTaskRow.instance_id == instance_id,
                                                      ExternalTaskRow.spiff_task_id == spiff_id)
                           .values(status="open", completed_at=None, retries=None, retry_at=None,
                                   error_message=None, variables=waiting[spiff_id]["variables"], **_FREED))
    new = [entry for spiff_id, entry in waiting.items() if spiff_id not in known]
    if new:
        uow.execute(insert(ExternalTaskRow), [
            {"tenant_id": tenant_id, "instance_id": instance_id, "definition_id": definition_id,
             "spiff_task_id": entry["spiff_task_id"], "element_id": entry["element_id"], "topic": entry["topic"],
             "status": "open", "variables": entry["variables"], "created_at": utcnow()} for entry in new])
    if new or reopened:
        uow.ready(EXTERNAL_TASKS)  # long polls of this process look again at commit
