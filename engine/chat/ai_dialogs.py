"""The ``ai_chat`` step: one waiting step that holds a whole dialog with the customer.

The runner opens an ``ai_dialogs`` row when the step becomes ready (``sync``); each customer
message is answered by an ``ai_turn`` job (``engine.chat.ai_turns``) that changes only the dialog
and the transcript; an ``ai_result`` job completes the step when it ends. This module owns the
dialog row (``LockedDialog``) and the step's side. Why, and how a turn neither loses nor doubles a
message: docs/internals.md, "AI dialogs".
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from SpiffWorkflow.util.task import TaskState
from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from bpmn.operators import AI_CHAT, operator_of
from engine import jobs
from engine.jobs.kinds import AI_TURN
from engine.errors import OperatorError, ScriptError
from engine.store.db import utcnow
from engine.store.models import AiDialog, AiKnowledge, Message
from engine.store.unit_of_work import UnitOfWork

DEFAULT_MAX_TURNS = 20
ACTIVE, DONE, ENDED = "active", "done", "ended"  # done: the step finished; ended: the step went away
OUTCOMES = ("handoff", "keyword", "max_turns", "error")


def is_ai_chat(task_spec) -> bool:
    return operator_of(task_spec) == AI_CHAT


@dataclass(frozen=True)
class DialogSettings:
    """A ready ai_chat step's settings, its prompt rendered against the task's data."""

    element_id: str
    prompt: str
    knowledge: str
    model: str | None
    max_turns: int
    keywords: tuple[str, ...]
    groups: tuple[str, ...] = ()  # handoff_groups: the groups the model may hand the customer to


def ready_dialogs(workflow, conversation, sandbox) -> dict[str, DialogSettings]:
    """Every READY ai_chat task of the workflow, by task id. Raises OperatorError (the instance
    fails) for a step with no conversation to talk in, or whose prompt cannot be rendered."""
    found = {}
    for task in workflow.get_tasks(state=TaskState.READY):
        if is_ai_chat(task.task_spec):
            found[str(task.id)] = _settings(task, conversation, sandbox)
    return found


def _settings(task, conversation, sandbox) -> DialogSettings:
    element_id = task.task_spec.bpmn_id
    properties = task.task_spec.extensions.get("properties", {})
    if conversation is None:
        raise OperatorError(f"ai_chat '{element_id}' has no conversation to talk in: the instance was not "
                            "started by a channel message, or its conversation has closed.",
                            data={"element_id": element_id})
    try:
        prompt = sandbox.render(properties.get("prompt") or "", dict(task.data))
    except ScriptError as exc:
        raise OperatorError(f"The prompt of ai_chat '{element_id}' could not be rendered: {exc.message}",
                            data={"element_id": element_id}) from None
    keywords = tuple(k.strip() for k in (properties.get("handoff_keywords") or "").split(",") if k.strip())
    groups = tuple(g.strip() for g in (properties.get("handoff_groups") or "").split(",") if g.strip())
    return DialogSettings(element_id, prompt, properties.get("knowledge") or "",
                          (properties.get("model") or "").strip() or None,
                          int(properties.get("max_turns") or DEFAULT_MAX_TURNS), keywords, groups)


# -- the runner's side: dialogs open and end with the instance state ---------------------------

class DialogRows:
    """Contributor (``engine.runtime.advance``): the dialog rows of a process with ai_chat steps.
    Registered before ``outbox.OutboxRows``: dialog rows are locked before the conversation's."""

    def contribute(self, advance):
        outbox = advance.outbox
        if outbox is None or not outbox.has_ai_steps:
            return None
        conversation_id = outbox.conversation and outbox.conversation.id
        dialogs = outbox.dialogs if advance.running else {}
        return lambda uow: sync(uow, advance.tenant_id, advance.instance_id, conversation_id, dialogs,
                                process_spoke=bool(outbox.texts))


def sync(uow: UnitOfWork, tenant_id: int, instance_id: int, conversation_id: int | None,
         ready: dict[str, DialogSettings], *, process_spoke: bool) -> None:
    """In the runner's save transaction: open a dialog for every newly ready step (or reopen one
    after ``process.retry``), end those whose step went away, and start a turn where customer
    messages wait for an answer and no turn is running. ``process_spoke``: this advance sent
    messages (stored after this, by ``outbox.settle``: dialog rows are locked before the
    conversation's, in every transaction that takes both). Core statements built once: this runs
    in the save of every advance that opens an AI step (the ORM's flush cost ~0.8 ms there)."""
    connection = uow.connection()
    known = {row.spiff_task_id: LockedDialog(row._mapping)
             for row in connection.execute(_OF_INSTANCE, {"instance_id": instance_id})}
    now = utcnow()
    for spiff_task_id, dialog in known.items():
        if dialog.status == ACTIVE and spiff_task_id not in ready:
            dialog.status, dialog.ended_at, dialog.busy_job_id, dialog.busy_until = ENDED, now, None, None
            dialog.save(uow)
    for spiff_task_id, settings in ready.items():
        dialog = known.get(spiff_task_id)
        if dialog is None:
            values = {"tenant_id": tenant_id, "instance_id": instance_id, "conversation_id": conversation_id,
                      "spiff_task_id": spiff_task_id, "element_id": settings.element_id, "status": ACTIVE,
                      "system_prompt": settings.prompt, "model": settings.model,
                      "knowledge_id": _knowledge_id(uow, tenant_id, settings.knowledge),
                      "max_turns": settings.max_turns, "handoff_keywords": list(settings.keywords),
                      "handoff_groups": list(settings.groups) or None, "turns": 0,
                      "answered_through": _opening_mark(uow, conversation_id, process_spoke), "created_at": now}
            dialog_id = connection.execute(_INSERT_DIALOG, values).scalar_one()
            dialog = LockedDialog({**values, "id": dialog_id, "busy_job_id": None, "busy_until": None})
        elif dialog.status == ENDED:  # ready again: process.retry after a failure elsewhere
            dialog.status, dialog.ended_at = ACTIVE, None
            dialog.save(uow)
        if dialog.status == ACTIVE and not busy(dialog, now) and pending(uow, dialog):
            # Handed to a call thread of this process, the turn takes its messages here, in
            # this transaction (``ai_turns.AiTurnRunner.prepare``): it starts with the model call.
            jobs.enqueue(uow, tenant_id, AI_TURN, payload={"dialog_id": dialog.id}, prepare=True)


def _knowledge_id(uow: UnitOfWork, tenant_id: int, text: str) -> int | None:
    """The stored copy of a knowledge text (made on first use; concurrent first uses share one)."""
    if not text:
        return None
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    query = select(AiKnowledge.id).where(AiKnowledge.tenant_id == tenant_id, AiKnowledge.sha256 == digest)
    found = uow.execute(query).scalar_one_or_none()
    if found is None:
        try:
            with uow.savepoint():
                uow.session.add(AiKnowledge(tenant_id=tenant_id, sha256=digest, text=text, created_at=utcnow()))
        except IntegrityError:  # another transaction stored it first
            pass
        found = uow.execute(query).scalar_one()
    return found


_KNOWLEDGE_KEPT = 64
_knowledge: OrderedDict[tuple[str, int], str] = OrderedDict()
_knowledge_lock = threading.Lock()


def knowledge_text(uow: UnitOfWork, knowledge_id: int) -> str:
    """A knowledge row never changes: read each once per process (and database)."""
    key = (uow.engine.url.render_as_string(), knowledge_id)
    with _knowledge_lock:
        text = _knowledge.get(key)
    if text is None:
        text = uow.execute(select(AiKnowledge.text).where(AiKnowledge.id == knowledge_id)).scalar_one()
        with _knowledge_lock:
            _knowledge[key] = text
            while len(_knowledge) > _KNOWLEDGE_KEPT:
                _knowledge.popitem(last=False)
    return text


def active_dialog_of(uow: UnitOfWork, conversation_id: int) -> int | None:
    """The dialog a new message of this conversation goes to (the oldest open one), if any."""
    return uow.execute(
        select(AiDialog.id).where(AiDialog.conversation_id == conversation_id, AiDialog.status == ACTIVE)
        .order_by(AiDialog.id).limit(1)).scalar_one_or_none()


_LAST_MESSAGE = select(func.max(Message.id)).where(Message.conversation_id == bindparam("conversation_id"))
_LAST_OUTGOING = _LAST_MESSAGE.where(Message.direction == "out")


def _opening_mark(uow: UnitOfWork, conversation_id: int, process_spoke: bool) -> int:
    """Where a new step's answering starts: after the process's last words to the customer (every
    message so far, when the process speaks in this very advance)."""
    return uow.run(_LAST_MESSAGE if process_spoke else _LAST_OUTGOING,
                   {"conversation_id": conversation_id}).scalar_one_or_none() or 0


def busy(dialog, now) -> bool:
    """A turn job holds the dialog (until ``busy_until``)."""
    return dialog.busy_job_id is not None and dialog.busy_until is not None and dialog.busy_until > now


_PENDING = (select(Message.id, Message.text)
            .where(Message.conversation_id == bindparam("conversation_id"), Message.direction == "in",
                   Message.id > bindparam("answered_through")).order_by(Message.id))


def pending(uow: UnitOfWork, dialog) -> list:
    """The customer's messages (``id``, ``text``) this dialog has not answered yet, oldest first."""
    return uow.run(_PENDING, {"conversation_id": dialog.conversation_id,
                              "answered_through": dialog.answered_through}).all()


# The save that opens a step and a turn's two transactions are on the path of every AI answer: the
# dialog is read and written with Core statements built once (the ORM's entity loading and flushes
# cost ~1 ms of CPU per turn).
_dialogs = AiDialog.__table__
_SELECT_LOCKED = select(*(_dialogs.c[name] for name in (
    "id", "tenant_id", "instance_id", "conversation_id", "spiff_task_id", "status", "system_prompt",
    "knowledge_id", "model", "max_turns", "handoff_keywords", "handoff_groups", "turns", "answered_through",
    "last_answer",
    "busy_job_id", "busy_until"))).with_for_update()
_LOCKED = _SELECT_LOCKED.where(_dialogs.c.id == bindparam("dialog_id"),
                               _dialogs.c.tenant_id == bindparam("tenant_id"))
_OF_INSTANCE = _SELECT_LOCKED.where(_dialogs.c.instance_id == bindparam("instance_id")).order_by(_dialogs.c.id)
_INSERT_DIALOG = insert(_dialogs).returning(_dialogs.c.id)


def locked_dialog(uow: UnitOfWork, dialog_id: int, tenant_id: int) -> "LockedDialog | None":
    """The dialog's row, locked for the caller's transaction; None when it is gone."""
    row = uow.run(_LOCKED, {"dialog_id": dialog_id, "tenant_id": tenant_id}).first()
    return LockedDialog(row._mapping) if row is not None else None


class LockedDialog:
    """A dialog's columns as read under its lock (or just inserted by this transaction); the
    attributes set on it are written back by ``save`` (called before every commit)."""

    def __init__(self, columns: Mapping[str, Any]):
        object.__setattr__(self, "_changed", {})
        for name, value in columns.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value) -> None:
        if name not in _dialogs.c:
            raise AttributeError(f"ai_dialogs has no column {name!r}")
        object.__setattr__(self, name, value)
        self._changed[name] = value

    def save(self, uow: UnitOfWork) -> None:
        if self._changed:
            uow.run(update(_dialogs).where(_dialogs.c.id == self.id).values(**self._changed))
            self._changed.clear()


def route_message(uow: UnitOfWork, tenant_id: int, conversation_id: int, message_id: int, variables: dict[str, Any]) -> bool:
    """For conversations.accept: hand a new customer message to the conversation's open dialog (a
    turn job; no instance advance needed). False when no dialog is open."""
    dialog_id = active_dialog_of(uow, conversation_id)
    if dialog_id is None:
        return False
    jobs.enqueue(uow, tenant_id, AI_TURN, payload={"dialog_id": dialog_id, "message_id": message_id,
                                                   "variables": variables})
    return True
