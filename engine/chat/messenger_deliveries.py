"""Messenger replies as durable deliveries: a reply becomes the messenger's API calls (a long text's
parts in order, the buttons with the last), queued one delivery per call on the chat's ordering key;
each is sent with the channel's *current* credentials and judged from the messenger's answer
(``MessengerCalls``, the delivery runner's ``ChannelCalls``, through the ``Messenger`` of its type).

A stored call holds no credential and no URL (``OutboundCall``); its delivery's ``url`` is
``<type>:<API method>``, which is what ``delivery.list`` shows, so no token is ever stored twice,
shown or logged.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import bindparam, select, update

from bpmn.operators import SEND_MESSAGE, operator_of
from bpmn.profile import read_message_buttons

from engine.chat import reachability
from engine.chat.messengers.protocol import Messenger
from engine.chat.messengers.registry import Registry
from engine.chat.messengers.sending import DEAD, SENT, WAIT, Button, Media, OutboundCall
from engine.errors import InvalidParamsError
from engine.outbound import delivery
from engine.outbound.delivery_runner import RETRY, ChannelCall, Outcome
from engine.outbound.delivery_runner import WAIT as RUNNER_WAIT
from engine.store.db import utcnow
from engine.store.models import Channel
from engine.store.unit_of_work import UnitOfWork

MESSAGE_EVENT, BUTTON_ANSWER_EVENT = "message", "button_answer"
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


def queue_reply(uow: UnitOfWork, tenant_id: int, channel_id: int, messenger: Messenger, chat_id: str, text: str,
                buttons: Sequence[Mapping[str, str]] = (), media: Media | None = None) -> delivery.Queued:
    """In the caller's transaction: one delivery per API call of the reply, in order; returns the last.
    InvalidParamsError when the messenger cannot carry it (an empty text, buttons over its limits)."""
    calls = messenger.calls(chat_id, text, as_buttons(buttons), media)
    last = None
    for call in calls:
        last = queue_call(uow, tenant_id, channel_id, messenger.type, call, chat_key(channel_id, chat_id), MESSAGE_EVENT)
    return last


def queue_call(uow: UnitOfWork, tenant_id: int, channel_id: int, channel_type: str, call: OutboundCall, ordering_key: str,
               event: str) -> delivery.Queued:
    return delivery.queue(uow, tenant_id, url=f"{channel_type}:{call.method}",
                          payload={"method": call.method, "payload": call.payload}, secret=None,
                          ordering_key=ordering_key, channel_id=channel_id, event=event)


def queue_button_answer(uow: UnitOfWork, tenant_id: int, channel_id: int, messenger: Messenger, answer: OutboundCall,
                        pressed_id: str) -> delivery.Queued:
    """The call acknowledging a pressed button (``Messenger.button_answer``, e.g. Telegram's
    ``answerCallbackQuery``), on a key of its own: it stops the customer's spinner and must not wait
    behind the chat's replies."""
    return queue_call(uow, tenant_id, channel_id, messenger.type, answer, f"{channel_id}/button/{pressed_id}",
                      BUTTON_ANSWER_EVENT)


_CREDENTIALS = select(Channel.type, Channel.settings).where(Channel.id == bindparam("channel_id"))  # per answer


class MessengerCalls:
    """The delivery runner's ``ChannelCalls`` for the channels of the ``messengers``; ``api_urls``
    (by channel type) are the configuration's API base URLs."""

    def __init__(self, messengers: Registry, api_urls: Mapping[str, str]):
        self.messengers = messengers
        self.api_urls = dict(api_urls)

    def handles(self, url: str) -> bool:
        kind, colon, _method = url.partition(":")
        return bool(colon) and kind in self.messengers

    def prepare(self, uow: UnitOfWork, row) -> ChannelCall | str:  # row: the delivery's columns (delivery_runner._ROW)
        channel_type = row.url.partition(":")[0]
        channel = None if row.channel_id is None else uow.run(
            _CREDENTIALS, {"channel_id": row.channel_id}).first()
        if channel is None or channel.type != channel_type:
            return "The channel was deleted: there are no credentials to send this with."
        chat_id = chat_of_key(row.channel_id, row.ordering_key)
        unreachable = reachability.reason_for(uow, row.channel_id, chat_id) if chat_id is not None else None
        if unreachable:
            return f"The customer cannot be reached: {unreachable}."
        messenger = self.messengers[channel_type]
        try:
            request = messenger.request(channel.settings or {}, OutboundCall.from_json(row.body),
                                        api_url=self.api_urls[channel_type])
        except (InvalidParamsError, ValueError, KeyError, TypeError):
            return f"The stored {messenger.name} call or the channel's settings cannot make a request."
        return ChannelCall(channel_type, request.method, request.url, request.headers, request.body or b"")

    def judge(self, call: ChannelCall, response) -> Outcome:
        messenger = self.messengers[call.channel_type]
        outcome = messenger.classify(response)
        result = _RESULTS.get(outcome.kind, RETRY)
        if result == delivery.SENT:
            return Outcome(result, status=response.status, external_id=outcome.message_id)
        said = "refused it for good" if result == delivery.DEAD else "did not take it"
        return Outcome(result, status=response.status, error=f"{messenger.name} {said}: {outcome.reason}",
                       retry_after_s=outcome.wait_s)

    def recorded(self, uow: UnitOfWork, row, outcome: Outcome) -> None:
        """A failed attempt is the channel's last error (``channel.get``), with when it happened."""
        if outcome.result != delivery.SENT and row.channel_id is not None:
            uow.execute(update(Channel).where(Channel.id == row.channel_id)
                               .values(last_error=f"Delivery {row.id}: {outcome.error}", last_error_at=utcnow())
                               .execution_options(synchronize_session=False))
