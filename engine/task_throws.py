"""``task.bpmn_error`` and ``task.bpmn_escalation`` (and a headless task's callback with a
``bpmn_error``): a human task ends with a BPMN error, or raises an escalation, that a boundary
event attached to it catches (Camunda's ``handleBpmnError`` and ``handleEscalation``).

Decided as a caller expects it (docs/api.md): a throw that no boundary event of the task catches is
``invalid_params`` naming the task and the code, and changes nothing; the task stays open. An error
(and an interrupting escalation) ends the task: its row is ``cancelled`` at once, with the code in
``result``, so that a completion cannot win it afterwards; a non-interrupting escalation leaves it
open. The instance goes on in the background, on the boundary's path, with the task's variables
and ``variables``.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from bpmn import all_task_specs, boundary_catchers
from bpmn.task_throws import ERROR, ESCALATION
from engine import jobs
from engine.errors import ConflictError, InvalidParamsError, NotFoundError
from engine.jobs.kinds import COMPLETE_TASK
from engine.store import history
from engine.store.db import utcnow
from engine.store.models import Instance, Task
from engine.store.unit_of_work import UnitOfWork

KINDS = (ERROR, ESCALATION)


def throw(uow: UnitOfWork, tenant_id: int, task_id: int, kind: str, code: str, message: str | None,
          variables: dict[str, Any], specs) -> dict[str, Any]:
    """The tenant's task ``task_id`` throws ``kind`` (``error`` or ``escalation``) ``code``;
    ``specs``: the process's spec cache (``engine.store.workflows.SpecCache``)."""
    task = uow.execute(select(Task).where(Task.tenant_id == tenant_id, Task.id == task_id)).scalar_one_or_none()
    if task is None:
        raise NotFoundError(f"Task {task_id} not found.")
    return throw_at(uow, task, kind, code, message, variables, specs)


def throw_at(uow: UnitOfWork, task: Task, kind: str, code: str, message: str | None, variables: dict[str, Any],
             specs) -> dict[str, Any]:
    """``throw`` for a task already found (a headless task's authorized callback)."""
    if task.status != "in_progress":
        raise ConflictError(f"Task {task.id} is {task.status}, not in_progress.")
    instance = uow.execute(select(Instance.status, Instance.definition_id, Instance.called_definitions)
                           .where(Instance.id == task.instance_id)).one()
    if instance.status != "running":
        raise ConflictError(f"Task {task.id} belongs to a {instance.status} instance.")
    (spec, composed), _pinned = specs.resolve(uow, task.tenant_id, instance.definition_id,
                                              instance.called_definitions)
    catchers = boundary_catchers(all_task_specs(spec, composed), task.element_id, kind, code)
    if not catchers:
        boundary = "an error" if kind == ERROR else "an escalation"
        raise InvalidParamsError(f"Task {task.id} ('{task.element_id}') has no {kind} boundary event that catches "
                                 f"'{code}'; the {kind} would reach nobody. Give the task {boundary} boundary event "
                                 f"with that code (or with none, to catch every code), or complete the task.",
                                 data={"param": f"{kind}_code"})
    ends_task = kind == ERROR or any(catcher.cancel_activity for catcher in catchers)
    status = task.status
    if ends_task:
        result = {f"bpmn_{kind}": code, **({"message": message} if message else {})}
        won = uow.execute(update(Task).where(Task.id == task.id, Task.status == "in_progress")
                          .values(status="cancelled", result=result, completed_at=utcnow())).rowcount == 1
        if not won:
            raise ConflictError(f"Task {task.id} was completed by another call.")
        status = "cancelled"
    jobs.enqueue(uow, task.tenant_id, COMPLETE_TASK, instance_id=task.instance_id,
                 payload={"spiff_task_id": task.spiff_task_id,
                          "throw": {"kind": kind, "code": code, "message": message, "variables": variables}})
    history.record(uow, tenant_id=task.tenant_id, instance_id=task.instance_id, kind="task_completed",
                   element_id=task.element_id, detail={"task_id": task.id, f"bpmn_{kind}": code})
    return {"task_id": task.id, "status": status, "instance_id": task.instance_id}
