"""The ``ai_chat`` step: one waiting step that holds a whole dialog with the customer.

The runner opens an ``ai_dialogs`` row when the step becomes ready (``sync``); each customer
message is answered by an ``ai_turn`` job (``AiTurnRunner``) that changes only the dialog and the
transcript; an ``ai_result`` job completes the step when it ends. Why, and how a turn neither
loses nor doubles a message: docs/internals.md, "AI dialogs".
"""
from __future__ import annotations

import functools
import hashlib
import logging
import re
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from SpiffWorkflow.util.task import TaskState
from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from ai import AiRequest, ProviderError, Turn
from bpmn.operators import AI_CHAT, operator_of
from engine import jobs
from engine.chat import outbox
from engine.jobs.kinds import AI_RESULT, AI_TURN, CHAT_MESSAGE
from engine.errors import OperatorError, ScriptError
from engine.store.db import db, utcnow
from engine.store.models import AiDialog, AiKnowledge, Instance, Message
from engine.telemetry import metrics

log = logging.getLogger("baton.ai_chat")

DEFAULT_MAX_TURNS = 20
HISTORY_LIMIT = 50  # messages sent to the model: the newest ones
# A turn holds its dialog (and its job) for the model's longest possible answer plus this; after a
# kill -9 mid-call the turn is taken up again once it runs out.
LEASE_MARGIN_S = 10.0
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
    return DialogSettings(element_id, prompt, properties.get("knowledge") or "",
                          (properties.get("model") or "").strip() or None,
                          int(properties.get("max_turns") or DEFAULT_MAX_TURNS), keywords)


# -- the runner's side: dialogs open and end with the instance state ---------------------------

def sync(tenant_id: int, instance_id: int, conversation_id: int | None, ready: dict[str, DialogSettings], *,
         process_spoke: bool) -> None:
    """In the runner's save transaction: open a dialog for every newly ready step (or reopen one
    after ``process.retry``), end those whose step went away, and start a turn where customer
    messages wait for an answer and no turn is running. ``process_spoke``: this advance sent
    messages (stored after this, by ``outbox.settle``: dialog rows are locked before the
    conversation's, in every transaction that takes both). Core statements built once: this runs
    in the save of every advance that opens an AI step (the ORM's flush cost ~0.8 ms there)."""
    connection = db.session.connection()
    known = {row.spiff_task_id: _LockedDialog(row)
             for row in connection.execute(_OF_INSTANCE, {"instance_id": instance_id})}
    now = utcnow()
    for spiff_task_id, dialog in known.items():
        if dialog.status == ACTIVE and spiff_task_id not in ready:
            dialog.status, dialog.ended_at, dialog.busy_job_id, dialog.busy_until = ENDED, now, None, None
            dialog.save()
    for spiff_task_id, settings in ready.items():
        dialog = known.get(spiff_task_id)
        if dialog is None:
            values = {"tenant_id": tenant_id, "instance_id": instance_id, "conversation_id": conversation_id,
                      "spiff_task_id": spiff_task_id, "element_id": settings.element_id, "status": ACTIVE,
                      "system_prompt": settings.prompt, "model": settings.model,
                      "knowledge_id": _knowledge_id(tenant_id, settings.knowledge),
                      "max_turns": settings.max_turns, "handoff_keywords": list(settings.keywords), "turns": 0,
                      "answered_through": _opening_mark(conversation_id, process_spoke), "created_at": now}
            dialog_id = connection.execute(_INSERT_DIALOG, values).scalar_one()
            dialog = _LockedDialog.of(id=dialog_id, busy_job_id=None, busy_until=None, **values)
        elif dialog.status == ENDED:  # ready again: process.retry after a failure elsewhere
            dialog.status, dialog.ended_at = ACTIVE, None
            dialog.save()
        if dialog.status == ACTIVE and not _busy(dialog, now) and _pending(dialog):
            # Handed to a call thread of this process, the turn takes its messages here, in
            # this transaction (``AiTurnRunner.prepare``): it starts with the model call.
            jobs.enqueue(tenant_id, AI_TURN, payload={"dialog_id": dialog.id}, prepare=True)


def _knowledge_id(tenant_id: int, text: str) -> int | None:
    """The stored copy of a knowledge text (made on first use; concurrent first uses share one)."""
    if not text:
        return None
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    query = select(AiKnowledge.id).where(AiKnowledge.tenant_id == tenant_id, AiKnowledge.sha256 == digest)
    found = db.session.execute(query).scalar_one_or_none()
    if found is None:
        try:
            with db.session.begin_nested():
                db.session.add(AiKnowledge(tenant_id=tenant_id, sha256=digest, text=text, created_at=utcnow()))
        except IntegrityError:  # another transaction stored it first
            pass
        found = db.session.execute(query).scalar_one()
    return found


def _knowledge_text(knowledge_id: int) -> str:
    """A knowledge row never changes: read each once per process (and database)."""
    return _read_knowledge(db.engine.url.render_as_string(), knowledge_id)


@functools.lru_cache(maxsize=64)
def _read_knowledge(_database: str, knowledge_id: int) -> str:
    return db.session.execute(select(AiKnowledge.text).where(AiKnowledge.id == knowledge_id)).scalar_one()


def active_dialog_of(conversation_id: int) -> int | None:
    """The dialog a new message of this conversation goes to (the oldest open one), if any."""
    return db.session.execute(
        select(AiDialog.id).where(AiDialog.conversation_id == conversation_id, AiDialog.status == ACTIVE)
        .order_by(AiDialog.id).limit(1)).scalar_one_or_none()


_LAST_MESSAGE = select(func.max(Message.id)).where(Message.conversation_id == bindparam("conversation_id"))
_LAST_OUTGOING = _LAST_MESSAGE.where(Message.direction == "out")


def _opening_mark(conversation_id: int, process_spoke: bool) -> int:
    """Where a new step's answering starts: after the process's last words to the customer (every
    message so far, when the process speaks in this very advance)."""
    return db.session.connection().execute(_LAST_MESSAGE if process_spoke else _LAST_OUTGOING,
                                           {"conversation_id": conversation_id}).scalar_one_or_none() or 0


def _busy(dialog, now) -> bool:
    return dialog.busy_job_id is not None and dialog.busy_until is not None and dialog.busy_until > now


_PENDING = (select(Message.id, Message.text)
            .where(Message.conversation_id == bindparam("conversation_id"), Message.direction == "in",
                   Message.id > bindparam("answered_through")).order_by(Message.id))


def _pending(dialog) -> list:
    """The customer's messages (``id``, ``text``) this dialog has not answered yet, oldest first."""
    return db.session.connection().execute(_PENDING, {"conversation_id": dialog.conversation_id,
                                                      "answered_through": dialog.answered_through}).all()


# A turn's two transactions are on the path of every AI answer: the dialog is read and written with
# Core statements built once (the ORM's entity loading and flushes cost ~1 ms of CPU per turn).
_dialogs = AiDialog.__table__
_TURN_COLUMNS = ("id", "tenant_id", "instance_id", "conversation_id", "spiff_task_id", "status", "system_prompt",
                 "knowledge_id", "model", "max_turns", "handoff_keywords", "turns", "answered_through",
                 "last_answer", "busy_job_id", "busy_until")
_LOCKED = (select(*(_dialogs.c[name] for name in _TURN_COLUMNS))
           .where(_dialogs.c.id == bindparam("dialog_id"), _dialogs.c.tenant_id == bindparam("tenant_id"))
           .with_for_update())
_OF_INSTANCE = (select(*(_dialogs.c[name] for name in _TURN_COLUMNS))
                .where(_dialogs.c.instance_id == bindparam("instance_id")).order_by(_dialogs.c.id).with_for_update())
_INSERT_DIALOG = insert(_dialogs).returning(_dialogs.c.id)


class _LockedDialog:
    """A dialog's row read under its lock (``_LOCKED``); the attributes a turn sets are written
    back by ``save`` (called before every commit of the turn's transactions)."""

    def __init__(self, row):
        object.__setattr__(self, "_changed", {})
        for name, value in row._mapping.items():
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, **columns) -> "_LockedDialog":
        """A dialog this transaction has just inserted with these columns (so holds)."""
        dialog = cls.__new__(cls)
        object.__setattr__(dialog, "_changed", {})
        for name, value in columns.items():
            object.__setattr__(dialog, name, value)
        return dialog

    def __setattr__(self, name: str, value) -> None:
        if name not in _dialogs.c:
            raise AttributeError(f"ai_dialogs has no column {name!r}")
        object.__setattr__(self, name, value)
        self._changed[name] = value

    def save(self) -> None:
        if self._changed:
            db.session.connection().execute(update(_dialogs).where(_dialogs.c.id == self.id).values(**self._changed))
            self._changed.clear()


# -- the turn job ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Claim:
    """What a turn took from the dialog in its first transaction."""

    request: AiRequest
    through: int            # the newest customer message answered by this turn
    last_customer_text: str


class AiTurnRunner:
    """Job handler for ``ai_turn`` jobs: one model call for the customer messages not yet answered."""

    def __init__(self, provider):
        self.provider = provider

    def handle(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        claim = job.prepared if isinstance(job.prepared, _Claim) else self._claim(job, worker_id)
        if claim is None:
            return
        started = time.perf_counter()
        try:
            reply, failure = self.provider.answer(claim.request), None
        except ProviderError as exc:
            reply, failure = None, exc.message
            log.warning("ai_chat dialog %s: the model failed: %s", job.payload["dialog_id"], exc.message)
        outcome = "failed" if failure is not None else "handoff" if reply.handoff else "answered"
        metrics.AI_TURN_SECONDS.labels(outcome).observe(time.perf_counter() - started)
        self._record(job, worker_id, claim, reply, failure)

    def give_up(self, job: jobs.ClaimedJob, worker_id: str) -> None:
        """The turn kept failing for a reason of ours: the step hands over with ``error``."""
        dialog = self._locked(job)
        if dialog is not None and dialog.status == ACTIVE:
            _end(dialog, "error", error="An internal error stopped the AI step.")
        self._done(job, worker_id, dialog)
        db.session.commit()

    def _locked(self, job: jobs.ClaimedJob) -> _LockedDialog | None:
        row = db.session.connection().execute(_LOCKED, {"dialog_id": job.payload["dialog_id"],
                                                        "tenant_id": job.tenant_id}).first()
        return _LockedDialog(row) if row is not None else None

    def prepare(self, job: jobs.ClaimedJob, worker_id: str) -> _Claim | None:
        """The first transaction's work, in the transaction that queues a turn handed over to this
        process (``jobs.enqueue(prepare=True)``, from ``sync``)."""
        return self._take(job, worker_id)

    def _claim(self, job: jobs.ClaimedJob, worker_id: str) -> _Claim | None:
        """First transaction: ``_take``, committed."""
        claim = self._take(job, worker_id)
        db.session.commit()
        return claim

    def _take(self, job: jobs.ClaimedJob, worker_id: str) -> _Claim | None:
        """Take the unanswered messages and mark the dialog busy with this job, in the caller's
        transaction; None (job finished) when there is nothing for this job to do."""
        dialog, now = self._locked(job), utcnow()
        if dialog is None or dialog.status != ACTIVE:
            _hand_to_instance(job, dialog)
            return self._done(job, worker_id)
        if _busy(dialog, now) and dialog.busy_job_id != job.id:
            return self._done(job, worker_id)  # the running turn looks again when it ends
        pending = _pending(dialog)
        if not pending:
            dialog.busy_job_id = dialog.busy_until = None
            return self._done(job, worker_id, dialog)
        keyword = _keyword_in(dialog.handoff_keywords, pending)
        if keyword is not None:
            dialog.answered_through = pending[-1].id
            _end(dialog, "keyword", last_customer_text=pending[-1].text,
                 reason=f"The customer wrote '{keyword}'.")
            return self._done(job, worker_id, dialog)
        lease = self.provider.max_seconds + LEASE_MARGIN_S
        dialog.busy_job_id, dialog.busy_until = job.id, now + timedelta(seconds=lease)
        knowledge = _knowledge_text(dialog.knowledge_id) if dialog.knowledge_id is not None else ""
        request = AiRequest(system_prompt=dialog.system_prompt, knowledge=knowledge,
                            history=tuple(_history(dialog.conversation_id, pending[-1].id)), model=dialog.model)
        claim = _Claim(request, pending[-1].id, pending[-1].text)
        dialog.save()
        jobs.extend_lease(job, worker_id, lease, commit=False)  # the busy mark's lease is the job's
        return claim

    def _record(self, job: jobs.ClaimedJob, worker_id: str, claim: _Claim, reply, failure: str | None) -> None:
        """Second transaction: store the answer, end the step or queue the next turn."""
        dialog = self._locked(job)
        if not jobs.finish(job, worker_id):
            db.session.rollback()  # the lease ran out and another run of this job took over: it answers
            return
        if dialog is None or dialog.status != ACTIVE or dialog.busy_job_id != job.id:
            db.session.commit()  # the step went away meanwhile (cancelled, a boundary event): not sent
            return
        dialog.busy_job_id = dialog.busy_until = None
        dialog.answered_through = claim.through
        if failure is not None:
            _end(dialog, "error", last_customer_text=claim.last_customer_text, error=failure)
        else:
            if reply.text.strip():
                conversation = outbox.active_conversation(dialog.instance_id)
                if conversation is not None:
                    outbox.record_outgoing(conversation, reply.text, "ai", reply_to=claim.through)
                dialog.turns += 1
                dialog.last_answer = reply.text
            if reply.handoff:
                _end(dialog, "handoff", last_customer_text=claim.last_customer_text, reason=reply.reason)
            elif dialog.turns >= dialog.max_turns:
                _end(dialog, "max_turns", last_customer_text=claim.last_customer_text)
            elif _pending(dialog):
                jobs.enqueue(job.tenant_id, AI_TURN, payload={"dialog_id": dialog.id})
        dialog.save()
        db.session.commit()

    def _done(self, job: jobs.ClaimedJob, worker_id: str, dialog: _LockedDialog | None = None) -> None:
        """The job is finished (in the caller's transaction) and ``dialog``'s changes written."""
        if dialog is not None:
            dialog.save()
        jobs.finish(job, worker_id)
        return None


def _end(dialog, outcome: str, *, last_customer_text: str | None = None, reason: str | None = None,
         error: str | None = None) -> None:
    """The step is over: its ``ai_result`` job completes the task in the instance."""
    dialog.status, dialog.ended_at = DONE, utcnow()
    dialog.busy_job_id = dialog.busy_until = None
    variables: dict[str, Any] = {"ai_outcome": outcome, "ai_last_answer": dialog.last_answer,
                                 "ai_handoff_reason": reason}
    if error is not None:
        variables["ai_error"] = error
    if last_customer_text is not None:
        variables["message_text"] = last_customer_text
    jobs.enqueue(dialog.tenant_id, AI_RESULT, instance_id=dialog.instance_id,
                 payload={"spiff_task_id": dialog.spiff_task_id, "variables": variables})


def _hand_to_instance(job: jobs.ClaimedJob, dialog: _LockedDialog | None) -> None:
    """A message routed to a dialog that ended before its turn ran, and that the dialog did not
    see, goes to the instance instead."""
    variables, message_id = job.payload.get("variables"), job.payload.get("message_id")
    if variables is None or dialog is None or message_id is None or message_id <= dialog.answered_through:
        return
    running = db.session.execute(select(Instance.id).where(
        Instance.id == dialog.instance_id, Instance.status == "running")).scalar_one_or_none()
    if running is not None:
        jobs.enqueue(job.tenant_id, CHAT_MESSAGE, instance_id=dialog.instance_id,
                     payload={"variables": variables})


def _keyword_in(keywords: list[str], messages: list) -> str | None:
    for keyword in keywords:
        pattern = re.compile(rf"(?<!\w){re.escape(keyword)}(?!\w)", re.IGNORECASE)
        if any(pattern.search(message.text) for message in messages):
            return keyword
    return None


_HISTORY = (select(Message.id, Message.direction, Message.text, Message.reply_to_id)
            .where(Message.conversation_id == bindparam("conversation_id"))
            .order_by(Message.id.desc()).limit(HISTORY_LIMIT * 2))


def _history(conversation_id: int, through: int) -> list[Turn]:
    """The newest messages of the conversation as the model reads them: the customer's up to
    ``through``, everything said to the customer, each AI answer right after the customer message
    it answered (an answer is stored after messages that arrived while it was being written)."""
    rows = db.session.connection().execute(_HISTORY, {"conversation_id": conversation_id}).all()
    rows = [row for row in rows if row.direction == "out" or row.id <= through]
    rows.sort(key=lambda row: (row.reply_to_id or row.id, row.reply_to_id is not None, row.id))
    return [Turn("user" if row.direction == "in" else "assistant", row.text) for row in rows[-HISTORY_LIMIT:]]


def route_message(tenant_id: int, conversation_id: int, message_id: int, variables: dict[str, Any]) -> bool:
    """For conversations.accept: hand a new customer message to the conversation's open dialog (a
    turn job; no instance advance needed). False when no dialog is open."""
    dialog_id = active_dialog_of(conversation_id)
    if dialog_id is None:
        return False
    jobs.enqueue(tenant_id, AI_TURN, payload={"dialog_id": dialog_id, "message_id": message_id,
                                              "variables": variables})
    return True
