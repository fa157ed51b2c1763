"""The ``ai_turn`` job: one model call answers the customer messages an ``ai_chat`` step's dialog
has not answered yet (``engine.chat.ai_dialogs`` opens and ends the dialogs). A turn changes only
the dialog and the transcript, in two units of work around the call: ``prepare`` (take the
messages, mark the dialog busy with this job) and ``_record`` (store the answer, end the step or
queue the next turn). Why, and how a turn neither loses nor doubles a message: docs/internals.md,
"AI dialogs".
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, select, update

from ai import AiRequest, ProviderError, Turn
from engine import jobs
from engine.chat import outbox
from engine.chat.ai_dialogs import ACTIVE, DONE, LockedDialog, busy, knowledge_text, locked_dialog, pending
from engine.jobs.kinds import AI_RESULT, AI_TURN, CHAT_MESSAGE
from engine.store import writes
from engine.store.db import utcnow
from engine.store.models import Conversation, Instance, Message
from engine.store.unit_of_work import UnitOfWork
from engine.telemetry import metrics

log = logging.getLogger("baton.ai_chat")

HISTORY_LIMIT = 50  # messages sent to the model: the newest ones
# A turn holds its dialog (and its job) for the model's longest possible answer plus this; after a
# kill -9 mid-call the turn is taken up again once it runs out.
LEASE_MARGIN_S = 10.0


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

    def handle(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> jobs.Then | None:
        """``prepare`` (unless the job was handed over prepared), then the model call with no unit
        of work open, then ``_record`` in the next one."""
        claim = job.prepared if isinstance(job.prepared, _Claim) else self.prepare(job, worker_id, uow)
        if claim is None:
            return None
        return jobs.Then(call=lambda: self._answer(job, claim),
                         step=lambda uow, answer: self._record(uow, job, worker_id, claim, *answer))

    def _answer(self, job: jobs.ClaimedJob, claim: _Claim) -> tuple[Any, str | None]:
        started = time.perf_counter()
        try:
            reply, failure = self.provider.answer(claim.request), None
        except ProviderError as exc:
            reply, failure = None, exc.message
            log.warning("ai_chat dialog %s: the model failed: %s", job.payload["dialog_id"], exc.message)
        outcome = "failed" if failure is not None else "handoff" if reply.handoff else "answered"
        metrics.AI_TURN_SECONDS.labels(outcome).observe(time.perf_counter() - started)
        return reply, failure

    def give_up(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        """The turn kept failing for a reason of ours: the step hands over with ``error``."""
        dialog = _locked(uow, job)
        if dialog is not None and dialog.status == ACTIVE:
            _end(uow, dialog, "error", error="An internal error stopped the AI step.")
        _done(uow, job, worker_id, dialog)

    def prepare(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> _Claim | None:
        """Take the unanswered messages and mark the dialog busy with this job, in the caller's
        unit of work: the turn's first one (``handle``), or the one that queues a turn
        handed over to this process (``jobs.enqueue(prepare=True)``, from ``ai_dialogs.sync``).
        None (job finished) when there is nothing for this job to do."""
        dialog, now = _locked(uow, job), utcnow()
        if dialog is None or dialog.status != ACTIVE:
            _hand_to_instance(uow, job, dialog)
            return _done(uow, job, worker_id)
        if busy(dialog, now) and dialog.busy_job_id != job.id:
            return _done(uow, job, worker_id)  # the running turn looks again when it ends
        waiting = pending(uow, dialog)
        if not waiting:
            dialog.busy_job_id = dialog.busy_until = None
            return _done(uow, job, worker_id, dialog)
        keyword = _keyword_in(dialog.handoff_keywords, waiting)
        if keyword is not None:
            dialog.answered_through = waiting[-1].id
            _end(uow, dialog, "keyword", last_customer_text=waiting[-1].text,
                 reason=f"The customer wrote '{keyword}'.")
            return _done(uow, job, worker_id, dialog)
        lease = self.provider.max_seconds + LEASE_MARGIN_S
        dialog.busy_job_id, dialog.busy_until = job.id, now + timedelta(seconds=lease)
        knowledge = knowledge_text(uow, dialog.knowledge_id) if dialog.knowledge_id is not None else ""
        request = AiRequest(system_prompt=dialog.system_prompt, knowledge=knowledge,
                            history=tuple(_history(uow, dialog.conversation_id, waiting[-1].id)), model=dialog.model,
                            handoff_groups=tuple(dialog.handoff_groups or ()))
        claim = _Claim(request, waiting[-1].id, waiting[-1].text)
        dialog.save(uow)
        jobs.extend_lease(uow, job, worker_id, lease)  # the busy mark's lease is the job's
        return claim

    @staticmethod
    def _record(uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, claim: _Claim, reply,
                failure: str | None) -> None:
        """Second unit of work: store the answer, end the step or queue the next turn."""
        dialog = _locked(uow, job)
        if not jobs.finish(uow, job, worker_id):
            raise writes.Lost()  # the lease ran out and another run of this job took over: it answers
        if dialog is None or dialog.status != ACTIVE or dialog.busy_job_id != job.id:
            return  # the step went away meanwhile (cancelled, a boundary event): not sent
        dialog.busy_job_id = dialog.busy_until = None
        dialog.answered_through = claim.through
        if failure is not None:
            _end(uow, dialog, "error", last_customer_text=claim.last_customer_text, error=failure)
        else:
            if reply.text.strip():
                conversation = outbox.active_conversation(uow, dialog.instance_id)
                if conversation is not None:
                    outbox.record_outgoing(uow, conversation, reply.text, "ai", reply_to=claim.through)
                dialog.turns += 1
                dialog.last_answer = reply.text
            if reply.handoff:
                _end(uow, dialog, "handoff", last_customer_text=claim.last_customer_text, reason=reply.reason,
                     group=reply.group)
            elif dialog.turns >= dialog.max_turns:
                _end(uow, dialog, "max_turns", last_customer_text=claim.last_customer_text)
            elif pending(uow, dialog):
                jobs.enqueue(uow, job.tenant_id, AI_TURN, payload={"dialog_id": dialog.id})
        dialog.save(uow)


def _locked(uow: UnitOfWork, job: jobs.ClaimedJob) -> LockedDialog | None:
    return locked_dialog(uow, job.payload["dialog_id"], job.tenant_id)


def _done(uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, dialog: LockedDialog | None = None) -> None:
    """The job is finished (in the unit of work) and ``dialog``'s changes written."""
    if dialog is not None:
        dialog.save(uow)
    jobs.finish(uow, job, worker_id)
    return None


def _end(uow: UnitOfWork, dialog, outcome: str, *, last_customer_text: str | None = None, reason: str | None = None,
         error: str | None = None, group: str | None = None) -> None:
    """The step is over: its ``ai_result`` job completes the task in the instance. A handoff that
    names a ``group`` gives the conversation to that group (``candidate_group``) and sets
    ``ai_handoff_group``, which the operator task after it may name in camunda:candidateGroups."""
    dialog.status, dialog.ended_at = DONE, utcnow()
    dialog.busy_job_id = dialog.busy_until = None
    variables: dict[str, Any] = {"ai_outcome": outcome, "ai_last_answer": dialog.last_answer,
                                 "ai_handoff_reason": reason}
    if error is not None:
        variables["ai_error"] = error
    if group is not None:
        variables["ai_handoff_group"] = group
        uow.run(update(Conversation).where(Conversation.id == dialog.conversation_id).values(candidate_group=group))
    if last_customer_text is not None:
        variables["message_text"] = last_customer_text
    jobs.enqueue(uow, dialog.tenant_id, AI_RESULT, instance_id=dialog.instance_id,
                 payload={"spiff_task_id": dialog.spiff_task_id, "variables": variables})


def _hand_to_instance(uow: UnitOfWork, job: jobs.ClaimedJob, dialog: LockedDialog | None) -> None:
    """A message routed to a dialog that ended before its turn ran, and that the dialog did not
    see, goes to the instance instead."""
    variables, message_id = job.payload.get("variables"), job.payload.get("message_id")
    if variables is None or dialog is None or message_id is None or message_id <= dialog.answered_through:
        return
    running = uow.execute(select(Instance.id).where(
        Instance.id == dialog.instance_id, Instance.status == "running")).scalar_one_or_none()
    if running is not None:
        jobs.enqueue(uow, job.tenant_id, CHAT_MESSAGE, instance_id=dialog.instance_id,
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


def _history(uow: UnitOfWork, conversation_id: int, through: int) -> list[Turn]:
    """The newest messages of the conversation as the model reads them: the customer's up to
    ``through``, everything said to the customer, each AI answer right after the customer message
    it answered (an answer is stored after messages that arrived while it was being written)."""
    rows = uow.run(_HISTORY, {"conversation_id": conversation_id}).all()
    rows = [row for row in rows if row.direction == "out" or row.id <= through]
    rows.sort(key=lambda row: (row.reply_to_id or row.id, row.reply_to_id is not None, row.id))
    return [Turn("user" if row.direction == "in" else "assistant", row.text) for row in rows[-HISTORY_LIMIT:]]
