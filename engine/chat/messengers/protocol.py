"""The ``Messenger`` protocol: what Baton needs of every messenger it talks to, and the shape of an
inbound call. Channels' lifecycle, inbound calls and deliveries use only this (through the
``registry``); each messenger's package (``telegram``, ``viber``, ``whatsapp``) implements it.

An abstract base class rather than a ``typing.Protocol``: a messenger that lacks an operation cannot
be built, so the registry fails when it is built (at import), not when a customer's first message
needs the missing part; and what only some messengers have (a GET handshake, a check to answer at
once, a pressed button to acknowledge, a channel found by one of its settings) comes with a default
that says "none here", which a ``Protocol`` gives only to classes that inherit from it anyway.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

from engine.chat.messengers.connection import Connection
from engine.chat.messengers.items import InboundItem, InboundMessage
from engine.chat.messengers.sending import Button, HttpRequest, Media, OutboundCall, SendOutcome
from engine.chat.messengers.settings import SettingsSpec
from engine.outbound import OutboundHttp, OutboundResponse


@dataclass(frozen=True)
class InboundCall:
    """One call a messenger made to Baton's webhook: the URL's query, the headers, and the body's
    exact bytes (signatures cover them), read when first needed: a call its headers refuse is
    refused without reading its body (nor being told that it is too large)."""

    query: Mapping[str, str]
    headers: Mapping[str, str]
    read_body: Callable[[], bytes] = field(default=bytes, repr=False)

    @classmethod
    def of(cls, body: bytes, headers: Mapping[str, str] | None = None,
           query: Mapping[str, str] | None = None) -> InboundCall:
        """A call whose body is already read."""
        return cls(query or {}, headers or {}, lambda: body)

    @cached_property
    def body(self) -> bytes:
        return self.read_body()


@dataclass(frozen=True)
class Addressed:
    """Which channels an inbound call is for (their inbound keys), read before it is verified; with
    its ``items`` when reading the keys meant parsing the body, so that it is parsed once."""

    keys: tuple[str, ...] = ()
    items: list[InboundItem] | None = None


class Messenger(ABC):
    """One messenger: its settings, connecting a channel, its inbound calls, its outbound calls."""

    type: ClassVar[str]                    # the channel type and start event trigger: "telegram"
    name: ClassVar[str]                    # how answers and errors name it: "Telegram"
    settings_spec: ClassVar[SettingsSpec]  # a channel's settings: exactly these keys, which are secret
    # Seconds after the customer's last message during which free-form replies are allowed (WhatsApp's
    # 24-hour customer-service window); None: no such window. Later a reply needs ``template_call``.
    window_s: ClassVar[float | None] = None
    # Whether one secret may sign calls for accounts Baton has no channel of (Meta's app secret signs
    # the notifications of every number of the app): such a call, verified with any channel's secret,
    # is acknowledged (200) and ignored, since the messenger would retry anything else for days.
    secret_shared_by_accounts: ClassVar[bool] = False

    # --- connecting a channel ----------------------------------------------------------------------

    @abstractmethod
    def connect(self, http: OutboundHttp, settings: Mapping[str, Any], public_url: str, *,
                api_url: str) -> Connection:
        """Check the credentials, then register Baton's webhook (built on ``public_url``) where the
        messenger has an API for it. A refusal is InvalidParamsError quoting the messenger, a
        messenger out of reach MessengerUnavailableError; either way nothing is registered."""

    @abstractmethod
    def registered_webhook(self, http: OutboundHttp, settings: Mapping[str, Any], *, api_url: str) -> str | None:
        """The URL the messenger calls now (None: none, or it cannot say), so that a channel
        unregisters only a webhook that is still its own."""

    @abstractmethod
    def disconnect(self, http: OutboundHttp, settings: Mapping[str, Any], *, api_url: str) -> None:
        """Unregister the webhook."""

    def settings_key(self, settings: Mapping[str, Any]) -> str | None:
        """The inbound key when one of the settings is what finds the channel, so that new settings
        move it without connecting again; None when connecting makes the key."""
        return None

    def key_taken(self, key: str) -> str:
        """Why a second channel cannot have this ``settings_key`` (the ``conflict``'s message)."""
        return f"Another {self.name} channel already has {key}."

    # --- inbound calls -------------------------------------------------------------------------------

    def answers_at_once(self, call: InboundCall) -> bool:
        """Whether the call is a check to answer 200 before anything else, even before its channel
        exists (Viber calls the URL while it registers it)."""
        return False

    @abstractmethod
    def addressed(self, call: InboundCall) -> Addressed:
        """Which channels the call says it is for; no keys when it names none (refused, 401)."""

    @abstractmethod
    def verifying_secret(self, settings: Mapping[str, Any], webhook_secret: str | None) -> str | None:
        """The secret a channel's calls prove they know: one of its settings, or the token registered
        with its webhook."""

    @abstractmethod
    def verify(self, call: InboundCall, secret: str) -> bool:
        """True when the call proves it knows ``secret`` (compared in constant time)."""

    @abstractmethod
    def parse(self, body: bytes) -> list[InboundItem]:
        """A verified call's items, in order; BadRequestError when the body is not such a call."""

    def key_of(self, item: InboundItem, keys: tuple[str, ...]) -> str | None:
        """The inbound key of the channel that takes ``item``, of the call's ``keys`` (None: no
        channel, acknowledged only). By default a call is for one channel."""
        return keys[0]

    def receipt_id(self, dedup_id: str, connection: Mapping[str, Any]) -> str:
        """The id an item is deduplicated by on its channel; by default the messenger's own."""
        return dedup_id

    def button_answer(self, message: InboundMessage, refusal: str | None = None) -> OutboundCall | None:
        """A call that acknowledges a pressed button at once (showing ``refusal`` when the press is not
        taken), or None when none is needed."""
        return None

    def answer_body(self, item: InboundItem, settings: Mapping[str, Any]) -> dict[str, Any] | None:
        """What to answer the call that carried ``item`` with, when the messenger reads the HTTP
        answer (Viber's welcome message to ``conversation_started``); None: the usual ``{"ok": true}``."""
        return None

    def read_receipt(self, message: InboundMessage, settings: Mapping[str, Any]) -> OutboundCall | None:
        """A call that marks a message the process took as read, when the channel's settings ask for
        it; None otherwise."""
        return None

    def handshake(self, query: Mapping[str, str], channel_settings: Iterable[Mapping[str, Any]]) -> str | None:
        """The answer to a GET check of the webhook URL when it matches one of these channels'
        settings; None (403) when it matches none, or the messenger makes no such check."""
        return None

    def file_request(self, http: OutboundHttp, settings: Mapping[str, Any], source: str, *,
                     api_url: str) -> HttpRequest:
        """The request that downloads an inbound file the messenger named ``source`` (a file or
        media id, or a URL), after whatever calls it takes to learn where it is, with the channel's
        credentials; OutboundError when the messenger refuses. By default the source is the URL."""
        return HttpRequest("GET", source, {})

    # --- outbound calls ------------------------------------------------------------------------------

    @abstractmethod
    def button_refusals(self, buttons: Sequence[Button]) -> list[str]:
        """What the messenger cannot carry of these reply buttons (deploy refuses them)."""

    @abstractmethod
    def calls(self, chat_id: str, text: str, buttons: Sequence[Button] = (), media: Media | None = None
              ) -> list[OutboundCall]:
        """The API calls of one reply (with ``media``: a file the messenger fetches by its URL, the
        text as its caption where it fits), in order, without credentials (each is stored in a
        delivery); InvalidParamsError when the messenger cannot carry it."""

    def attachment_refusals(self, attachment_type: str, size_given: bool) -> list[str]:
        """What the messenger cannot send of a send_message's attachment (deploy refuses it)."""
        return []

    def template_call(self, chat_id: str, template: Mapping[str, Any]) -> OutboundCall | None:
        """The call sending a message template (``{name, language, params}``, checked) to the chat;
        None when the messenger has no templates."""
        return None

    @abstractmethod
    def request(self, settings: Mapping[str, Any], outbound: OutboundCall, *, api_url: str) -> HttpRequest:
        """The HTTP request of a stored call, with the channel's current credentials."""

    def failure_of(self, error_code: int | None) -> str:
        """Why a message the messenger accepted and later reported ``failed`` (with ``error_code``)
        is dead, in ``delivery_failed``'s words (``sending.FAILURES``)."""
        return "other"

    @abstractmethod
    def classify(self, response: OutboundResponse) -> SendOutcome:
        """What an answer to a call came to: sent, wait, retry, or dead with the messenger's reason."""
