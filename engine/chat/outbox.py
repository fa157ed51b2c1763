"""The conversation side of an advance: the ``send_message`` operator, outgoing messages, closing.

``send_message`` calls nobody, so unlike ``http`` it runs inside the advance: after the engine
steps the runner lets an ``Outbox`` render every READY send_message task's ``text`` against the
task's data and run the task, and steps again until none is left. The rendered messages are
stored and their deliveries queued in the runner's save transaction (``settle``), so a message
exists exactly when the saved state that sent it does. ``settle`` also closes the conversation
of an instance that ended.

``record_outgoing`` is the one way an outgoing message is written (``send_message``, the AI
step and ``conversation.send``): the message row and its delivery in the caller's transaction,
after locking the conversation row, so the messages of one chat are numbered, committed and
delivered in one order. A web-chat answer is one signed POST; a messenger answer is one delivery
per API call (``messenger_deliveries``). A send_message task's ``buttons`` go with its text, and
so does its file (``attachment_url``, rendered, http(s) and let through by the SSRF guard, else
the task fails before anything is stored).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from urllib.parse import urlsplit

from SpiffWorkflow.util.task import TaskState
from sqlalchemy import bindparam, insert, select, update

from bpmn import operators_used
from bpmn.operators import AI_CHAT, SEND_MESSAGE, operator_of
from bpmn.profile import read_message_buttons, read_message_template
from engine.chat import messenger_deliveries
from engine.chat.channel_configs import TYPES as CHANNEL_TRIGGERS
from engine.chat.messengers.registry import MESSENGERS
from engine.chat.messengers.sending import ATTACHMENT_TYPES, Media
from engine.errors import InvalidParamsError, OperatorError, OutboundRefusedError, ScriptError
from engine.outbound import delivery
from engine.outbound.guard import checked_host
from engine.store.db import utcnow
from engine.store.models import Channel, Conversation, Message
from engine.store.unit_of_work import UnitOfWork

MAX_TEXT = 10_000
MAX_ATTACHMENT_URL = 2048
MAX_MESSAGES_PER_ADVANCE = 100


# Without a configured client: an attachment URL must be public (BATON_ALLOW_PRIVATE_URLS off).
public_only = partial(checked_host, allow_private=False)


@dataclass(frozen=True)
class ActiveConversation:
    id: int
    tenant_id: int
    channel_id: int
    chat_id: str
    channel_type: str = "webchat"


# Core statements on the session's connection, built once: an advance that talks runs them every
# time, and the ORM's statement building and unit of work cost more than these rows (the rows
# written are the same: tests/unit/engine/chat/test_accept.py).
_conversations, _channels, _messages = Conversation.__table__, Channel.__table__, Message.__table__
_ACTIVE = (select(_conversations.c.id, _conversations.c.tenant_id, _conversations.c.channel_id,
                  _conversations.c.chat_id, _channels.c.type)
           .join(_channels, _channels.c.id == _conversations.c.channel_id)
           .where(_conversations.c.instance_id == bindparam("instance_id"), _conversations.c.status == "active"))
_TOUCH = (update(_conversations).where(_conversations.c.id == bindparam("conversation_id"))
          .values(last_message_at=bindparam("now")))
_CHANNEL = (select(_channels.c.type, _channels.c.webhook_url, _channels.c.webhook_secret)
            .where(_channels.c.id == bindparam("channel_id")))
_OUTGOING = (insert(_messages).values(
    tenant_id=bindparam("tenant_id"), conversation_id=bindparam("conversation_id"), direction="out",
    author=bindparam("author"), text=bindparam("text"), delivery_id=bindparam("delivery_id"),
    reply_to_id=bindparam("reply_to_id"), created_at=bindparam("now"), content=bindparam("content"))
    .returning(_messages.c.id))
_CLOSE = (update(_conversations)
          .where(_conversations.c.instance_id == bindparam("ended"), _conversations.c.status == "active")
          .values(status="closed", closed_at=bindparam("now")))


def active_conversation(uow: UnitOfWork, instance_id: int) -> ActiveConversation | None:
    row = uow.run(_ACTIVE, {"instance_id": instance_id}).first()
    return ActiveConversation(*row) if row is not None else None


def record_outgoing(uow: UnitOfWork, conversation: ActiveConversation, text: str | None, author: str,
                    reply_to: int | None = None, buttons: list[dict[str, str]] | None = None,
                    template: dict | None = None, media: Media | None = None) -> int:
    """Store an outgoing message and queue its delivery (or a messenger's deliveries) in the caller's
    transaction; the conversation's row is locked first (its ``last_message_at`` is updated). The
    message's id. ``template`` (checked): what a messenger with a customer-service window sends
    instead when the window is closed (``messenger_deliveries.queue_reply``); with no ``text``, the
    message is the template alone (messengers with templates only)."""
    now = utcnow()
    connection = uow.connection()
    connection.execute(_TOUCH, {"conversation_id": conversation.id, "now": now})
    channel = connection.execute(_CHANNEL, {"channel_id": conversation.channel_id}).one()
    messenger = MESSENGERS.get(channel.type)
    if messenger is None or messenger.window_s is None:
        template = None              # only a messenger with a window has templates (WhatsApp)
    content = {key: value for key, value in (("buttons", buttons), ("template", template)) if value} or None
    if media is not None:
        content = {**(content or {}), "attachment": {"type": media.type, "url": media.url}}
    if text is None:
        text = f"(template {template['name']})" if template else ""
        queued = messenger_deliveries.queue_reply(uow, conversation.tenant_id, conversation.channel_id, messenger,
                                                  conversation.chat_id, None, (), template)
    elif messenger is not None:
        queued = messenger_deliveries.queue_reply(uow, conversation.tenant_id, conversation.channel_id, messenger,
                                                  conversation.chat_id, text, buttons or (), template, media)
    else:
        payload = delivery.message_payload(conversation.chat_id, text, now, buttons)
        if media is not None:
            payload["attachment"] = {"type": media.type, "url": media.url}
        queued = delivery.queue(
            uow, conversation.tenant_id, url=channel.webhook_url,
            payload=payload,
            secret=channel.webhook_secret,
            ordering_key=messenger_deliveries.chat_key(conversation.channel_id, conversation.chat_id),
            channel_id=conversation.channel_id)
    return uow.run(_OUTGOING, {
        "tenant_id": conversation.tenant_id, "conversation_id": conversation.id, "author": author, "text": text,
        "delivery_id": queued.id, "reply_to_id": reply_to, "now": now, "content": content}).scalar_one()


def close_for_instance(uow: UnitOfWork, instance_id: int) -> None:
    """The instance ended (completed, failed or cancelled): its conversation closes."""
    uow.run(_CLOSE, {"ended": instance_id, "now": utcnow()})


def starts_on_a_channel(specs: tuple) -> bool:
    """Whether an instance can have a conversation at all: only a channel start event opens one."""
    spec, _ = specs
    return any((ts.extensions or {}).get("properties", {}).get("trigger") in CHANNEL_TRIGGERS
               for ts in spec.task_specs.values() if getattr(ts, "extensions", None))


def is_send_message(task_spec) -> bool:
    return operator_of(task_spec) == SEND_MESSAGE


def talks(specs: tuple) -> bool:
    """Whether a process can talk to a customer at all (else an advance reads no conversation)."""
    return bool(operators_used(*specs) & {SEND_MESSAGE, AI_CHAT})


def has_ai_steps(specs: tuple) -> bool:
    return AI_CHAT in operators_used(*specs)


@dataclass
class Outbox:
    """The messages one advance sends; built (with the conversation read) before the engine runs."""

    sandbox: object
    conversation: ActiveConversation | None
    has_ai_steps: bool = False
    check_url: Callable[[str], object] = public_only
    texts: list[str] = field(default_factory=list)
    buttons: list[list[dict[str, str]]] = field(default_factory=list)   # each text's buttons
    media: list[Media | None] = field(default_factory=list)             # each text's file
    templates: list[dict | None] = field(default_factory=list)          # each text's template (WhatsApp)
    dialogs: dict = field(default_factory=dict)  # ready ai_chat steps (engine.ai_chat.ready_dialogs)

    @classmethod
    def for_instance(cls, uow: UnitOfWork, instance_id: int, specs: tuple, sandbox,
                     check_url: Callable[[str], object] = public_only) -> "Outbox | None":
        """Inside the load transaction; None when the process has no send_message or ai_chat task.
        ``check_url`` is the SSRF guard's check of an attachment URL (OutboundRefusedError)."""
        if not talks(specs):
            return None
        return cls(sandbox, active_conversation(uow, instance_id), has_ai_steps(specs), check_url)

    def run_ready(self, workflow) -> bool:
        """Send and complete every READY send_message task; False when there was none."""
        ready = [task for task in workflow.get_tasks(state=TaskState.READY) if is_send_message(task.task_spec)]
        for task in ready:
            self._send(task)
        return bool(ready)

    def _send(self, task) -> None:
        element_id = task.task_spec.bpmn_id

        def fail(message: str) -> OperatorError:
            return OperatorError(message, data={"element_id": element_id})

        if self.conversation is None:
            raise fail(f"send_message '{element_id}' has no conversation to send to: the instance was not "
                       "started by a channel message, or its conversation has closed.")
        if len(self.texts) >= MAX_MESSAGES_PER_ADVANCE:
            raise fail(f"The instance sent more than {MAX_MESSAGES_PER_ADVANCE} messages at once "
                       "(a loop that never waits?) and was stopped.")
        template = task.task_spec.extensions.get("properties", {}).get("text") or ""
        try:
            text = self.sandbox.render(template, dict(task.data))
        except ScriptError as exc:
            raise fail(f"The text of send_message '{element_id}' could not be rendered: {exc.message}") from None
        if not text.strip():
            raise fail(f"The text of send_message '{element_id}' rendered empty; nothing was sent.")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from some variable: no body could carry it
            raise fail(f"The text of send_message '{element_id}' is not valid Unicode text.") from None
        if len(text) > MAX_TEXT:
            raise fail(f"The text of send_message '{element_id}' is {len(text)} characters long; "
                       f"at most {MAX_TEXT} can be sent.")
        buttons = read_message_buttons(task.task_spec.extensions.get("properties", {}))
        channel_type = self.conversation.channel_type
        messenger = MESSENGERS.get(channel_type)
        if buttons and messenger is not None:
            # Deploy refuses these for a process bound to the channel; a called process is not.
            refusals = messenger.button_refusals(messenger_deliveries.as_buttons(buttons))
            if refusals:
                raise fail(f"send_message '{element_id}' has buttons {channel_type} cannot carry: "
                           f"{' '.join(refusals)}")
        media = self._media(task, fail)
        if media is not None and messenger is not None:
            try:
                messenger.calls(self.conversation.chat_id, text, messenger_deliveries.as_buttons(buttons), media)
            except InvalidParamsError as error:
                raise fail(f"send_message '{element_id}' cannot be sent to {channel_type}: {error.message}") from None
        template = read_message_template(task.task_spec.extensions.get("properties", {}))
        if template is not None and messenger is not None and messenger.window_s is not None:
            template = self._rendered_template(template, task, fail)
        else:
            template = None          # a template is WhatsApp's: other channels send the text
        self.texts.append(text)
        self.buttons.append(buttons)
        self.media.append(media)
        self.templates.append(template)
        task.run()

    def _media(self, task, fail: Callable[[str], OperatorError]) -> Media | None:
        """The task's file (``attachment_url``, rendered, ``attachment_type``, ``attachment_size``):
        an http(s) URL the SSRF guard lets through, else the task fails and nothing is sent."""
        properties = task.task_spec.extensions.get("properties", {})
        template, element_id = properties.get("attachment_url"), task.task_spec.bpmn_id
        if not template:
            return None
        where = f"The attachment_url of send_message '{element_id}'"
        try:
            url = self.sandbox.render(template, dict(task.data)).strip()
            size = self.sandbox.render(properties["attachment_size"], dict(task.data)).strip() \
                if properties.get("attachment_size") else None
        except ScriptError as exc:
            raise fail(f"{where} could not be rendered: {exc.message}") from None
        kind = properties.get("attachment_type")
        if kind not in ATTACHMENT_TYPES:
            raise fail(f"send_message '{element_id}' needs an attachment_type of {' or '.join(ATTACHMENT_TYPES)}.")
        if len(url) > MAX_ATTACHMENT_URL or urlsplit(url).scheme.lower() not in ("http", "https"):
            raise fail(f"{where} must be an http:// or https:// URL of at most {MAX_ATTACHMENT_URL} characters, "
                       f"not '{url[:200]}'; nothing was sent.")
        try:
            self.check_url(url)
        except OutboundRefusedError as error:
            raise fail(f"{where} is refused: {error.message} Nothing was sent.") from None
        if size is not None and not (size.isascii() and size.isdigit() and 0 < int(size) < 2**53):
            raise fail(f"The attachment_size of send_message '{element_id}' must be a number of bytes, not "
                       f"'{size[:50]}'.")
        return Media(kind, url, int(size) if size is not None else None)

    def _rendered_template(self, template: dict, task, fail) -> dict:
        """The step's template with each of its ``template_params`` rendered against the task's data."""
        element_id = task.task_spec.bpmn_id
        params = template["params"]
        if not isinstance(params, list) or not all(isinstance(value, str) for value in params):
            raise fail(f"The template_params of send_message '{element_id}' must be a JSON list of strings.")
        try:
            rendered = [self.sandbox.render(value, dict(task.data)) for value in params]
        except ScriptError as exc:
            raise fail(f"The template_params of send_message '{element_id}' could not be rendered: "
                       f"{exc.message}") from None
        try:
            return messenger_deliveries.checked_template({**template, "params": rendered}, "template")
        except InvalidParamsError as exc:
            raise fail(f"The template of send_message '{element_id}' cannot be sent: {exc.message}") from None


class OutboxRows:
    """Contributor (``engine.runtime.advance``): the messages an advance sent, and the closing of an
    ended instance's chat (no write at all for a process no channel starts)."""

    def contribute(self, advance):
        status, outbox, specs = advance.outcome.status, advance.outbox, advance.specs
        if not settle_writes(status, outbox, specs):
            return None
        return lambda uow: settle(uow, advance.instance_id, status, outbox, specs)


def settle(uow: UnitOfWork, instance_id: int, status: str, outbox: Outbox | None, specs: tuple) -> None:
    """In the runner's save transaction: store what the advance sent; close an ended instance's chat
    (no statement at all for a process no channel starts: the hot path of webhook and RPC starts)."""
    if outbox is not None and outbox.texts:
        for text, buttons, template, media in zip(outbox.texts, outbox.buttons, outbox.templates, outbox.media):
            record_outgoing(uow, outbox.conversation, text, "process", buttons=buttons, template=template,
                            media=media)
    if _closes_chat(status, specs):
        close_for_instance(uow, instance_id)


def settle_writes(status: str, outbox: Outbox | None, specs: tuple) -> bool:
    """Whether ``settle`` would write anything for this advance."""
    return bool(outbox is not None and outbox.texts) or _closes_chat(status, specs)


def _closes_chat(status: str, specs: tuple) -> bool:
    return status != "running" and starts_on_a_channel(specs)
