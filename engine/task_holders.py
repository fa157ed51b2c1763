"""Who holds a task or a conversation: ``task.claim``, ``task.unclaim``, ``task.assign`` and
``conversation.claim``, ``conversation.assign``.

A claim is one conditional UPDATE (the row is open and nobody else holds it), so of two concurrent
claims exactly one changes the row and the other finds it held: a ``conflict``. An operator is the
``user`` of the calling API key (``engine.auth``); a key without one cannot claim, nor release
what it does not hold (``invalid_params`` naming the key's missing ``user``). Handing over to
someone else (``*.assign``) needs the permission of that name. A task's inbox rows
(``task_audience``) are rewritten with its holder, and its instance's history records who took it
(``task_claimed``) or gave it (``task_assigned``, ``task.unclaim`` too: to nobody); a conversation's,
the instance it belongs to (``conversation_claimed``, ``conversation_assigned``).
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import or_, select, update

from engine.errors import ConflictError, InvalidParamsError, NotFoundError
from engine.runtime.task_assignment import replace_audience
from engine.store import history
from engine.store.models import Conversation, Task
from engine.store.unit_of_work import UnitOfWork

TASK_ASSIGN = "task.assign"
CONVERSATION_ASSIGN = "conversation.assign"


def user_of_key(principal) -> str:
    """The calling key's user; InvalidParamsError when the key stands for nobody."""
    if not principal.user:
        raise InvalidParamsError(
            "This API key stands for no user, so it cannot claim or release: give the operator a key of "
            "their own (apikey.create with 'user'), or hand the work over with an assign method.",
            data={"key": "no_user"})  # no param is wrong: the key is (docs/api.md#task-claim)
    return principal.user


def claim_task(uow: UnitOfWork, principal, task_id: int) -> dict[str, Any]:
    me = user_of_key(principal)
    won = uow.execute(update(Task).where(
        Task.tenant_id == principal.tenant_id, Task.id == task_id, Task.status == "in_progress",
        or_(Task.assignee.is_(None), Task.assignee == me)).values(assignee=me)).rowcount == 1
    task = _task(uow, principal.tenant_id, task_id)
    if not won:
        _refuse_task(task, f"Task {task_id} is held by '{task.assignee}'; ask them, or someone with "
                           f"'{TASK_ASSIGN}', to hand it over.")
    replace_audience(uow, task)
    _record(uow, task, "task_claimed")
    return _task_answer(task)


def unclaim_task(uow: UnitOfWork, principal, task_id: int) -> dict[str, Any]:
    """The holder (or a key that may assign) releases the task to its candidates."""
    held_by = [Task.assignee.is_(None)]
    if principal.allows(TASK_ASSIGN):
        held_by.append(Task.assignee.is_not(None))
    else:
        held_by.append(Task.assignee == user_of_key(principal))
    released = uow.execute(update(Task).where(
        Task.tenant_id == principal.tenant_id, Task.id == task_id, Task.status == "in_progress",
        or_(*held_by)).values(assignee=None)).rowcount == 1
    task = _task(uow, principal.tenant_id, task_id)
    if not released:
        _refuse_task(task, f"Task {task_id} is held by '{task.assignee}'; only they, or someone with "
                           f"'{TASK_ASSIGN}', may release it.")
    replace_audience(uow, task)
    _record(uow, task, "task_assigned")
    return _task_answer(task)


def assign_task(uow: UnitOfWork, principal, task_id: int, user: str | None) -> dict[str, Any]:
    """Hand the task to ``user`` (None: to nobody, back to its candidates); the method's permission
    (``task.assign``) is checked by the caller."""
    changed = uow.execute(update(Task).where(
        Task.tenant_id == principal.tenant_id, Task.id == task_id, Task.status == "in_progress")
        .values(assignee=user)).rowcount == 1
    task = _task(uow, principal.tenant_id, task_id)
    if not changed:
        _refuse_task(task, "")
    replace_audience(uow, task)
    _record(uow, task, "task_assigned")
    return _task_answer(task)


def _task(uow: UnitOfWork, tenant_id: int, task_id: int) -> Task:
    task = uow.execute(select(Task).where(Task.tenant_id == tenant_id, Task.id == task_id)
                       .execution_options(populate_existing=True)).scalar_one_or_none()
    if task is None:
        raise NotFoundError(f"Task {task_id} not found.")
    return task


def _record(uow: UnitOfWork, task: Task, kind: str) -> None:
    history.record(uow, tenant_id=task.tenant_id, instance_id=task.instance_id, kind=kind,
                   element_id=task.element_id, detail={"task_id": task.id, "assignee": task.assignee})


def _refuse_task(task: Task, held: str) -> None:
    if task.status != "in_progress":
        raise ConflictError(f"Task {task.id} is {task.status}; only an open task can change hands.")
    raise ConflictError(held or f"Task {task.id} could not change hands.")


def _task_answer(task: Task) -> dict[str, Any]:
    return {"task_id": task.id, "status": task.status, "assignee": task.assignee,
            "candidate_users": task.candidate_users or [], "candidate_groups": task.candidate_groups or []}


# --- conversations ---------------------------------------------------------------------------

def claim_conversation(uow: UnitOfWork, principal, binding_id: int) -> dict[str, Any]:
    me = user_of_key(principal)
    won = uow.execute(update(Conversation).where(
        Conversation.tenant_id == principal.tenant_id, Conversation.id == binding_id,
        Conversation.status == "active", or_(Conversation.assignee.is_(None), Conversation.assignee == me))
        .values(assignee=me)).rowcount == 1
    conversation = _conversation(uow, principal.tenant_id, binding_id)
    if not won:
        _refuse_conversation(conversation, f"Conversation {binding_id} is held by '{conversation.assignee}'; ask "
                                           f"them, or someone with '{CONVERSATION_ASSIGN}', to hand it over.")
    _record_conversation(uow, conversation, "conversation_claimed")
    return _conversation_answer(conversation)


def assign_conversation(uow: UnitOfWork, principal, binding_id: int, user: str | None) -> dict[str, Any]:
    changed = uow.execute(update(Conversation).where(
        Conversation.tenant_id == principal.tenant_id, Conversation.id == binding_id,
        Conversation.status == "active").values(assignee=user)).rowcount == 1
    conversation = _conversation(uow, principal.tenant_id, binding_id)
    if not changed:
        _refuse_conversation(conversation, "")
    _record_conversation(uow, conversation, "conversation_assigned")
    return _conversation_answer(conversation)


def _record_conversation(uow: UnitOfWork, conversation: Conversation, kind: str) -> None:
    if conversation.instance_id is not None:
        history.record(uow, tenant_id=conversation.tenant_id, instance_id=conversation.instance_id, kind=kind,
                       detail={"binding_id": conversation.id, "assignee": conversation.assignee})


def _conversation(uow: UnitOfWork, tenant_id: int, binding_id: int) -> Conversation:
    conversation = uow.execute(select(Conversation).where(
        Conversation.tenant_id == tenant_id, Conversation.id == binding_id)
        .execution_options(populate_existing=True)).scalar_one_or_none()
    if conversation is None:
        raise NotFoundError(f"Conversation {binding_id} not found.")
    return conversation


def _refuse_conversation(conversation: Conversation, held: str) -> None:
    if conversation.status != "active":
        raise ConflictError(f"Conversation {conversation.id} is {conversation.status}; only an active one can "
                            "change hands.")
    raise ConflictError(held or f"Conversation {conversation.id} could not change hands.")


def _conversation_answer(conversation: Conversation) -> dict[str, Any]:
    return {"binding_id": conversation.id, "status": conversation.status, "assignee": conversation.assignee,
            "candidate_group": conversation.candidate_group}
