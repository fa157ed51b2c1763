"""Messenger replies as durable deliveries: a reply becomes the messenger's API calls (a long text's
parts in order, the buttons with the last), queued one delivery per call on the chat's ordering key;
each is sent with the channel's *current* credentials and judged from the messenger's answer
(``MessengerCalls``, the delivery runner's ``ChannelCalls``, through the ``Messenger`` of its type).

A stored call holds no credential and no URL (``OutboundCall``); its delivery's ``url`` is
``<type>:<API method>``, which is what ``delivery.list`` shows, so no token is ever stored twice,
shown or logged.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, func, select, update

from bpmn.operators import SEND_MESSAGE, operator_of
from bpmn.profile import DEFAULT_TEMPLATE_LANGUAGE, read_message_buttons, template_problem

from engine.chat import reachability
from engine.chat.messengers.protocol import Messenger
from engine.chat.messengers.registry import Registry
from engine import jobs
from engine.chat.messengers.sending import (BLOCKED, DEAD, FAILURES, OTHER, SENT, UNREACHABLE, UNSUBSCRIBED, WAIT,
                                            WINDOW_CLOSED, Button,
                                            Media, OutboundCall)
from engine.jobs.kinds import MESSAGE
from engine.errors import InvalidParamsError
from engine.outbound import delivery
from engine.chat.pacing import Pacing
from engine.outbound.delivery_runner import RETRY, SLOT, ChannelCall, Later, AttemptResult
from engine.outbound.delivery_runner import WAIT as RUNNER_WAIT
from engine.store.db import utcnow
from engine.store.models import Channel, Conversation, Instance
from engine.store.unit_of_work import UnitOfWork

MESSAGE_EVENT, BUTTON_ANSWER_EVENT, READ_EVENT = "message", "button_answer", "read"
_RESULTS = {SENT: delivery.SENT, DEAD: delivery.DEAD, WAIT: RUNNER_WAIT}


def chat_key(channel_id: int, chat_id: str) -> str:
    """The ordering key of a chat's deliveries (web-chat's too): one chat's answers go out in order."""
    return f"{channel_id}:{chat_id}"


def chat_of_key(channel_id: int, ordering_key: str) -> str | None:
    prefix = chat_key(channel_id, "")
    return ordering_key[len(prefix):] if ordering_key.startswith(prefix) else None


def as_buttons(buttons: Sequence[Mapping[str, str]]) -> list[Button]:
    """The profile's ``[{id, title}]`` as the messengers take them."""
    return [Button(button["id"], button["title"]) for button in buttons]


def deploy_refusals(task_specs, messenger: Messenger) -> list[dict]:
    """For a process bound to a messenger's channel: every send_message task whose buttons or file
    that messenger cannot carry, as deploy's ``{element_id, line, message}`` entries."""
    refusals = []
    for spec in task_specs:
        if operator_of(spec) != SEND_MESSAGE:
            continue
        properties = spec.extensions.get("properties", {})
        buttons = read_message_buttons(properties)
        problems = messenger.button_refusals(as_buttons(buttons)) if buttons else []
        if problems:
            refusals.append({"element_id": spec.bpmn_id, "line": None,
                             "message": f"send_message '{spec.bpmn_id}' has buttons a {messenger.type} channel cannot "
                                        f"carry: {' '.join(problems)}"})
        problems = messenger.attachment_refusals(properties.get("attachment_type") or "",
                                                 bool(properties.get("attachment_size"))) \
            if properties.get("attachment_url") else []
        if problems:
            refusals.append({"element_id": spec.bpmn_id, "line": None,
                             "message": f"send_message '{spec.bpmn_id}' has a file a {messenger.type} channel cannot "
                                        f"send: {' '.join(problems)}"})
    return refusals


def queue_reply(uow: UnitOfWork, tenant_id: int, channel_id: int, messenger: Messenger, chat_id: str, text: str | None,
                buttons: Sequence[Mapping[str, str]] = (), template: Mapping[str, Any] | None = None,
                media: Media | None = None) -> delivery.Queued:
    """In the caller's transaction: one delivery per API call of the reply, in order; returns the last.
    InvalidParamsError when the messenger cannot carry it (an empty text, buttons over its limits).

    ``template`` (checked: ``checked_template``), for a messenger with a customer-service window
    (WhatsApp): what goes instead of the reply when the window is closed at the moment it is sent
    (kept with the last call; the earlier parts are then skipped). Without a text, the template is
    the reply, sent whether the window is open or not. ``media``: a file sent with the text."""
    instead = messenger.template_call(chat_id, template) if template is not None else None
    key = chat_key(channel_id, chat_id)
    if text is None and instead is not None:
        return queue_call(uow, tenant_id, channel_id, messenger.type, instead, key, MESSAGE_EVENT)
    calls = messenger.calls(chat_id, text, as_buttons(buttons), media)
    last = None
    for number, call in enumerate(calls, start=1):
        closed = None if instead is None else (instead.to_dict() if number == len(calls) else SKIP)
        last = queue_call(uow, tenant_id, channel_id, messenger.type, call, key, MESSAGE_EVENT, window_closed=closed)
    return last


SKIP = "skip"   # a part of a reply that a template stands in for when the window is closed


def queue_call(uow: UnitOfWork, tenant_id: int, channel_id: int, channel_type: str, call: OutboundCall, ordering_key: str,
               event: str, *, window_closed: dict[str, Any] | str | None = None) -> delivery.Queued:
    payload: dict[str, Any] = {"method": call.method, "payload": call.payload}
    if window_closed is not None:
        payload["window_closed"] = window_closed
    return delivery.queue(uow, tenant_id, url=f"{channel_type}:{call.method}", payload=payload, secret=None,
                          ordering_key=ordering_key, channel_id=channel_id, event=event)


def checked_template(template: Any, param: str = "template") -> dict[str, Any]:
    """A template given to ``conversation.send`` (or rendered from a send_message step):
    ``{name, language?, params?}`` with ``params`` a list of strings; InvalidParamsError naming what
    is wrong otherwise."""
    if not isinstance(template, Mapping):
        raise InvalidParamsError(f"{param} must be an object {{name, language, params}}.", data={"param": param})
    unknown = sorted(set(template) - {"name", "language", "params"})
    if unknown:
        raise InvalidParamsError(f"{param} has unknown keys: {', '.join(map(str, unknown))} "
                                 "(it takes name, language, params).", data={"param": f"{param}.{unknown[0]}"})
    checked = {"name": template.get("name"), "language": template.get("language", DEFAULT_TEMPLATE_LANGUAGE),
               "params": template.get("params", [])}
    problem = template_problem(checked["name"], checked["language"], checked["params"])
    if problem:
        key = {"template": "name", "template_language": "language", "template_params": "params"}[problem[0]]
        raise InvalidParamsError(problem[1].replace(problem[0], f"{param}.{key}", 1),
                                 data={"param": f"{param}.{key}"})
    return checked


def queue_button_answer(uow: UnitOfWork, tenant_id: int, channel_id: int, messenger: Messenger, answer: OutboundCall,
                        pressed_id: str) -> delivery.Queued:
    """The call acknowledging a pressed button (``Messenger.button_answer``, e.g. Telegram's
    ``answerCallbackQuery``), on a key of its own: it stops the customer's spinner and must not wait
    behind the chat's replies."""
    return queue_call(uow, tenant_id, channel_id, messenger.type, answer, f"{channel_id}/button/{pressed_id}",
                      BUTTON_ANSWER_EVENT)


def queue_read_receipt(uow: UnitOfWork, tenant_id: int, channel_id: int, messenger: Messenger, receipt: OutboundCall,
                       message_id: str) -> delivery.Queued:
    """The call marking a customer's message as read (WhatsApp's blue ticks), on a key of its own:
    it never waits behind, nor holds up, the chat's replies."""
    return queue_call(uow, tenant_id, channel_id, messenger.type, receipt, f"{channel_id}/read/{message_id}",
                      READ_EVENT)


LATER_LEAD_S = 0.25        # a paced job wakes this long before its slot, and waits the rest in its call thread
WINDOW_MARGIN_S = 60.0     # the window is taken as closed a minute early: Meta counts from its own clock
_conversations, _instances = Conversation.__table__, Instance.__table__
_CUSTOMER_WROTE = select(func.max(_conversations.c.customer_wrote_at)).where(
    _conversations.c.channel_id == bindparam("channel_id"), _conversations.c.chat_id == bindparam("chat_id"))
_CREDENTIALS = select(Channel.type, Channel.settings).where(Channel.id == bindparam("channel_id"))  # per answer


class MessengerCalls:
    """The delivery runner's ``ChannelCalls`` for the channels of the ``messengers``; ``api_urls``
    (by channel type) are the configuration's API base URLs."""

    def __init__(self, messengers: Registry, api_urls: Mapping[str, str], pacing: Pacing | None = None):
        self.messengers = messengers
        self.api_urls = dict(api_urls)
        self.pacing = pacing

    def handles(self, url: str) -> bool:
        kind, colon, _method = url.partition(":")
        return bool(colon) and kind in self.messengers

    def prepare(self, uow: UnitOfWork, row, job_payload: Mapping[str, Any] | None = None
                ) -> ChannelCall | AttemptResult | Later | str:  # row: the delivery's columns (delivery_runner._ROW)
        channel_type = row.url.partition(":")[0]
        channel = None if row.channel_id is None else uow.run(
            _CREDENTIALS, {"channel_id": row.channel_id}).first()
        if channel is None or channel.type != channel_type:
            return AttemptResult(delivery.DEAD, error="The channel was deleted: there are no credentials to send this with.",
                           failure=OTHER)
        chat_id = chat_of_key(row.channel_id, row.ordering_key)
        unreachable = reachability.reason_for(uow, row.channel_id, chat_id) if chat_id is not None else None
        if unreachable:
            return AttemptResult(delivery.DEAD, error=f"The customer cannot be reached: {unreachable}.",
                           failure=_unreachable_failure(unreachable))
        messenger = self.messengers[channel_type]
        try:
            outbound = OutboundCall.from_json(row.body)
        except (ValueError, KeyError, TypeError):
            return f"The stored {messenger.name} call cannot make a request."
        if messenger.window_s is not None and chat_id is not None:
            outbound = self._within_window(uow, messenger, row, chat_id, outbound)
            if isinstance(outbound, AttemptResult):
                return outbound
        try:
            request = messenger.request(channel.settings or {}, outbound, api_url=self.api_urls[channel_type])
        except (InvalidParamsError, ValueError, KeyError, TypeError):
            return f"The stored {messenger.name} call or the channel's settings cannot make a request."
        slot = None
        if self.pacing is not None and chat_id is not None:     # replies are paced; acknowledgements are not
            reserved = self.pacing.reserve(uow, channel_type, row.channel_id, chat_id, (job_payload or {}).get(SLOT))
            if reserved is not None and reserved.later:
                return Later(reserved.at - timedelta(seconds=LATER_LEAD_S), {SLOT: reserved.at.isoformat()})
            slot = reserved.at if reserved is not None else None
        return ChannelCall(channel_type, request.method, request.url, request.headers, request.body or b"",
                           not_before=slot)

    def _within_window(self, uow: UnitOfWork, messenger: Messenger, row, chat_id: str,
                       outbound: OutboundCall) -> OutboundCall | AttemptResult:
        """The call to make given the customer-service window (WhatsApp's 24 hours since the customer
        last wrote, a minute early): open, the call; closed, the reply's template instead (its other
        parts are skipped: sent without a call), a template as it is, or dead (``window_closed``)
        before any call."""
        wrote = uow.run(_CUSTOMER_WROTE, {"channel_id": row.channel_id, "chat_id": chat_id}).scalar()
        now = utcnow()
        if wrote is not None and now < wrote + timedelta(seconds=messenger.window_s - WINDOW_MARGIN_S):
            return outbound
        instead = json.loads(row.body).get("window_closed")
        if instead == SKIP:
            return AttemptResult(delivery.SENT, error=None)
        if isinstance(instead, dict):
            return OutboundCall(instead["method"], instead["payload"])
        if outbound.payload.get("type") == "template":
            return outbound
        since = "never" if wrote is None else f"last at {wrote.replace(microsecond=0).isoformat()}Z"
        hours = round(messenger.window_s / 3600)
        return AttemptResult(delivery.DEAD, failure=WINDOW_CLOSED, error=(
            f"{messenger.name}'s {hours}-hour window is closed (the customer wrote {since}): only a template may be "
            "sent now, and this reply has none (template on send_message, or conversation.send with a template). "
            f"Nothing was sent to {messenger.name}."))

    def judge(self, call: ChannelCall, response) -> AttemptResult:
        messenger = self.messengers[call.channel_type]
        outcome = messenger.classify(response)
        result = _RESULTS.get(outcome.kind, RETRY)
        if result == delivery.SENT:
            return AttemptResult(result, status=response.status, external_id=outcome.message_id)
        said = "refused it for good" if result == delivery.DEAD else "did not take it"
        return AttemptResult(result, status=response.status, error=f"{messenger.name} {said}: {outcome.reason}",
                       retry_after_s=outcome.wait_s, failure=outcome.failure, whole_bot=outcome.whole_bot)

    def recorded(self, uow: UnitOfWork, row, outcome: AttemptResult) -> None:
        """A failed attempt is the channel's last error (``channel.get``), with when it happened; a
        messenger that said to slow down slows the whole bot (or the chat) down (``pacing``)."""
        if outcome.result == delivery.SENT and outcome.answered_at is not None and self.pacing is not None \
                and row.channel_id is not None:
            self.pacing.sent(uow, row.url.partition(":")[0], row.channel_id,
                             chat_of_key(row.channel_id, row.ordering_key), outcome.answered_at)
        if outcome.result == RUNNER_WAIT and self.pacing is not None and row.channel_id is not None:
            self.pacing.slow_down(uow, row.url.partition(":")[0], row.channel_id,
                                  chat_of_key(row.channel_id, row.ordering_key), outcome.retry_after_s,
                                  outcome.whole_bot)
        if outcome.result != delivery.SENT and row.channel_id is not None:
            uow.execute(update(Channel).where(Channel.id == row.channel_id)
                               .values(last_error=f"Delivery {row.id}: {outcome.error}", last_error_at=utcnow())
                               .execution_options(synchronize_session=False))

    def died(self, uow: UnitOfWork, row, error: str | None, failure: str | None) -> None:
        """A reply to a chat is dead: its conversation's instance hears ``delivery_failed``."""
        chat_id = None if row.channel_id is None else chat_of_key(row.channel_id, row.ordering_key)
        if chat_id is not None:
            tell_process(uow, row.channel_id, chat_id, error, failure)


DELIVERY_FAILED = "delivery_failed"
_WAITING_INSTANCE = (select(_conversations.c.tenant_id, _conversations.c.instance_id)
                     .join(_instances, _instances.c.id == _conversations.c.instance_id)
                     .where(_conversations.c.channel_id == bindparam("channel_id"),
                            _conversations.c.chat_id == bindparam("chat_id"), _conversations.c.status == "active",
                            _instances.c.status == "running"))


def tell_process(uow: UnitOfWork, channel_id: int, chat_id: str, error: str | None, failure: str | None) -> bool:
    """In the transaction that made a reply dead: the message ``delivery_failed`` (variables
    ``delivery_error``, ``delivery_reason``) for the running instance of the chat's active
    conversation, as an instance job: a catch event, receive task or message boundary event of that
    name takes it; when nothing waits for it, it changes nothing. False when the chat has no such instance."""
    found = uow.run(_WAITING_INSTANCE, {"channel_id": channel_id, "chat_id": chat_id}).first()
    if found is None:
        return False
    jobs.enqueue(uow, found.tenant_id, MESSAGE, instance_id=found.instance_id, payload={
        "message": DELIVERY_FAILED, "variables": {"delivery_error": error or "The reply could not be delivered.",
                                                  "delivery_reason": failure if failure in FAILURES else OTHER}})
    return True


def _unreachable_failure(reason: str) -> str:
    """The delivery_reason of a reply to a chat marked unreachable: a customer who unsubscribed or
    blocked the bot, else the chat is gone for the bot (a Telegram group that removed it)."""
    if "unsubscribed" in reason:
        return UNSUBSCRIBED
    return BLOCKED if "blocked" in reason else UNREACHABLE
