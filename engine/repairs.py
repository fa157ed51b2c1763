"""An operator's repairs of a running or failed instance: ``process.set_variables``,
``process.skip``, ``process.rewind`` (contract §5.7; the workflow side is ``engine.runtime.repairs``).

Each takes the locks a save takes, in its order (the instance's jobs, then the instance), so it
never races an advance: one in flight loses its compare-and-swap (the revision moves) and runs
again on the repaired state. A repair is refused while other work of the instance is due (a
message, a task's completion ... queued and not yet applied: ``conflict``, try again), so what
was checked is what is applied. Variables are set here, in the state itself; a skip or a rewind is
checked here and applied by the runner as the first thing of a ``repair`` job queued in the same
unit of work, whose advance steps on and whose contributors write the rows the new state implies.
Each is recorded in the instance's history with its actor; a refused call changes nothing.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import delete, exists, select, update

from bpmn import waiting_external_tasks
from engine import jobs
from engine.errors import ConflictError, InvalidParamsError, NotFoundError
from engine.jobs.kinds import REPAIR, TIMER
from engine.json_values import problem
from engine.runtime import repairs, subscription_rows
from engine.runtime.outcome import current_variables
from engine.store import history, workflows
from engine.store.db import utcnow
from engine.store.models import ExternalTaskRow, Instance, Job, Task
from engine.store.unit_of_work import UnitOfWork

REPAIRABLE = ("running", "failed")
MAX_NAME = 255


def set_variables(uow: UnitOfWork, specs, tenant_id: int, instance_id: int, variables: dict[str, Any],
                  remove: list[str]) -> dict[str, Any]:
    """Set ``variables`` and remove the names in ``remove``, in one change between two advances."""
    _check_names(variables, remove)
    instance = _locked(uow, tenant_id, instance_id)
    if instance.state is None:
        raise ConflictError(f"Instance {instance_id} has not run its first step yet; set its variables when it "
                            "has (or pass them to process.retry).")
    workflow = repairs.restored(instance.state, _specs(uow, specs, instance))
    after = repairs.set_variables(workflow, variables, remove)
    uow.execute(update(Instance).where(Instance.id == instance.id)
                .values(state=workflows.dump_workflow(workflow), variables=current_variables(workflow),
                        revision=Instance.revision + 1))
    _refresh_open_task_rows(uow, instance.id, workflow)
    history.record(uow, tenant_id=tenant_id, instance_id=instance.id, kind="variables_set",
                   detail={"set": sorted(variables), "removed": sorted(remove)})
    return {"instance_id": instance.id, "variables": after}


def _refresh_open_task_rows(uow: UnitOfWork, instance_id: int, workflow) -> None:
    """The open human and external task rows show what their task sees after the change, not the
    snapshot taken when they opened: a form filled from that snapshot (``task.list``, the console)
    would otherwise put the old values back when it is completed, and a worker's next fetch would
    work on them."""
    tasks = {str(task.id): task for task in workflow.get_tasks()}
    open_rows = uow.execute(select(Task.spiff_task_id).where(Task.instance_id == instance_id,
                                                             Task.status == "in_progress")).scalars().all()
    for spiff_id in open_rows:
        if spiff_id in tasks:
            uow.execute(update(Task).where(Task.instance_id == instance_id, Task.spiff_task_id == spiff_id)
                        .values(variables=dict(tasks[spiff_id].data)))
    for waiting in waiting_external_tasks(workflow):
        uow.execute(update(ExternalTaskRow).where(ExternalTaskRow.instance_id == instance_id,
                                                  ExternalTaskRow.spiff_task_id == waiting["spiff_task_id"],
                                                  ExternalTaskRow.status == "open")
                    .values(variables=waiting["variables"]))


def skip(uow: UnitOfWork, specs, tenant_id: int, instance_id: int, element_id: str,
         variables: dict[str, Any] | None, *, dry_run: bool = False) -> dict[str, Any]:
    """Complete the element the instance waits or failed at without running it, then go on."""
    return _move(uow, specs, tenant_id, instance_id, element_id, variables, repairs.SKIP, dry_run)


def rewind(uow: UnitOfWork, specs, tenant_id: int, instance_id: int, element_id: str,
           variables: dict[str, Any] | None, *, dry_run: bool = False) -> dict[str, Any]:
    """Go back to an element the instance passed and run again from there."""
    return _move(uow, specs, tenant_id, instance_id, element_id, variables, repairs.REWIND, dry_run)


def _move(uow: UnitOfWork, specs, tenant_id: int, instance_id: int, element_id: str,
          variables: dict[str, Any] | None, action: str, dry_run: bool) -> dict[str, Any]:
    variables = dict(variables or {})
    _check_names(variables, [])
    instance = _locked(uow, tenant_id, instance_id)
    resolved = _specs(uow, specs, instance)
    repairs.check_element(resolved, element_id)
    if instance.state is None:
        raise InvalidParamsError(f"Instance {instance_id} failed before its first step: it waits at no element "
                                 "and has passed none; process.retry starts it again.",
                                 data={"param": "element_id", "element_id": element_id, "cause": "not_started"})
    workflow = repairs.restored(instance.state, resolved)
    check = repairs.check_skip if action == repairs.SKIP else repairs.check_rewind
    checked = check(workflow, element_id)
    answer = {"instance_id": instance.id, "element_id": element_id, "cancelled": checked.cancelled}
    if dry_run:
        return {**answer, "status": instance.status, "dry_run": True}
    failed, error = instance.status == "failed", instance.error
    _queue(uow, instance, action, checked, variables)
    detail: dict[str, Any] = {"cancelled": checked.cancelled, "set": sorted(variables)}
    if failed:
        detail["failed"] = error or {}
    history.record(uow, tenant_id=tenant_id, instance_id=instance.id,
                   kind="skipped" if action == repairs.SKIP else "rewound", element_id=element_id, detail=detail)
    return {**answer, "status": "running", "dry_run": False}


def _queue(uow: UnitOfWork, instance: Instance, action: str, checked: repairs.Checked,
           variables: dict[str, Any]) -> None:
    """The repair's job, and what it takes away at once: the instance waits for nothing until the
    job has run (no message or signal is routed to what it cancels, no timer fires there: the
    job's advance writes what it waits for next), and the rows of the tasks it cancels are closed
    (a task.complete or a worker's report before the job runs is refused)."""
    failed = instance.status == "failed"
    uow.execute(update(Instance).where(Instance.id == instance.id)
                .values(status="running", error=None, completed_at=None, waiting_for=[],
                        revision=Instance.revision + 1))
    subscription_rows.drop(uow, instance.id)
    uow.execute(delete(Job).where(Job.instance_id == instance.id, Job.kind == TIMER))
    jobs.enqueue(uow, instance.tenant_id, REPAIR, instance_id=instance.id,
                 payload={"action": action, "task_ids": checked.task_ids, "variables": variables})
    if failed:
        jobs.requeue_held(uow, instance.id)  # what an internal failure kept aside runs after the repair
    if checked.cancelled_task_ids:
        now = utcnow()
        uow.execute(update(Task).where(Task.instance_id == instance.id, Task.status == "in_progress",
                                       Task.spiff_task_id.in_(checked.cancelled_task_ids))
                    .values(status="cancelled", completed_at=now))
        uow.execute(update(ExternalTaskRow).where(ExternalTaskRow.instance_id == instance.id, ExternalTaskRow.status == "open",
                                               ExternalTaskRow.spiff_task_id.in_(checked.cancelled_task_ids))
                    .values(status="cancelled", completed_at=now, worker_id=None, lock_expires_at=None))


def _locked(uow: UnitOfWork, tenant_id: int, instance_id: int) -> Instance:
    """The tenant's instance, locked as a save locks it (its jobs, then its row), if it may be
    repaired now: NotFoundError, else ConflictError for an ended one or one with work due."""
    known = uow.execute(select(Instance.id).where(Instance.tenant_id == tenant_id, Instance.id == instance_id)).first()
    if known is None:
        raise NotFoundError(f"Instance {instance_id} not found.")
    uow.execute(select(Job.id).where(Job.instance_id == instance_id).order_by(Job.id).with_for_update())
    instance = uow.execute(select(Instance).where(Instance.id == instance_id).with_for_update()
                           .execution_options(populate_existing=True)).scalar_one()
    if instance.status not in REPAIRABLE:
        raise ConflictError(f"Instance {instance_id} is {instance.status}; only running or failed instances can be "
                            "repaired.")
    due = uow.execute(select(exists().where(Job.instance_id == instance_id, Job.run_at <= utcnow()))).scalar()
    if due and instance.status == "running":
        raise ConflictError(f"Instance {instance_id} is advancing (work of it is queued or running); repair it once "
                            "it waits.", data={"cause": "advancing"})
    return instance


def _specs(uow: UnitOfWork, specs, instance: Instance) -> tuple:
    resolved, _pinned = specs.resolve(uow, instance.tenant_id, instance.definition_id, instance.called_definitions)
    return resolved


def _check_names(variables: dict[str, Any], remove: list[str]) -> None:
    for name in (*variables, *remove):
        if not name or len(name) > MAX_NAME:
            raise InvalidParamsError(f"A variable name must be 1 to {MAX_NAME} characters: {name[:40]!r}.",
                                     data={"param": "variables" if name in variables else "remove"})
    both = sorted(set(variables) & set(remove))
    if both:
        raise InvalidParamsError(f"Variable '{both[0]}' is both set and removed; do one.", data={"param": "remove"})
    found = problem(variables, "variables")
    if found is not None:
        raise InvalidParamsError(f"{found}", data={"param": "variables", "where": found.where})
