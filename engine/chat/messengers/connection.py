"""Connecting a messenger channel: what a successful connect gives the channel to keep, the rule that
messengers only call public HTTPS URLs, and calling a messenger while a user waits (its failures
become errors that say what happened, never a traceback and never a secret)."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from engine.errors import InvalidParamsError, MessengerUnavailableError, OutboundError, OutboundRefusedError
from engine.chat.messengers.sending import HttpRequest
from engine.outbound import OutboundHttp, OutboundResponse

MAX_QUOTE = 300


@dataclass(frozen=True)
class Connection:
    """What a successful connect learned: the bot's identity for ``channel.get``, the registered
    webhook URL, the key that finds the channel when the messenger calls (``inbound_key``), and
    (Telegram) the secret token the messenger will send back, to store as a secret."""

    bot_id: str
    bot_name: str
    webhook_url: str | None
    inbound_key: str
    webhook_secret: str | None = field(default=None, repr=False)
    details: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        """What the channel keeps of it to show (``Channel.connection``): the bot and the details."""
        return {"bot_id": self.bot_id, "bot_name": self.bot_name, **self.details}

    def shown(self) -> dict[str, Any]:
        """Everything but the secret, for API answers."""
        return {"bot_id": self.bot_id, "bot_name": self.bot_name, "webhook_url": self.webhook_url,
                **self.details}


def webhook_url(public_url: str, path: str, **query: str) -> str:
    """``BATON_PUBLIC_URL`` + ``path`` (+ a query), without doubling the slash between them."""
    url = public_url.rstrip("/") + path
    return f"{url}?{urlencode(query)}" if query else url


def require_public_https(messenger: str, public_url: str | None, allow_private: bool) -> None:
    """Messengers only call HTTPS URLs (Telegram setWebhook, Viber set_webhook, Meta's callback URL);
    outside development (``BATON_ALLOW_PRIVATE_URLS`` off) a non-HTTPS ``BATON_PUBLIC_URL`` is refused
    before anything is sent, with the reason."""
    if allow_private:
        return
    scheme = urlsplit(public_url or "").scheme.lower()
    if scheme != "https":
        shown = f"'{public_url}'" if public_url else "unset"
        raise InvalidParamsError(
            f"{messenger} only calls HTTPS webhook URLs: set BATON_PUBLIC_URL to the public https:// "
            f"address of this server (it is {shown}).",
            data={"param": "type", "config": "BATON_PUBLIC_URL"})


def call(http: OutboundHttp, messenger: str, request: HttpRequest) -> OutboundResponse:
    """Send one request while a user waits (the client's timeout applies); any transport failure is
    MessengerUnavailableError."""
    try:
        return http.request(request.method, request.url, headers=request.headers, body=request.body)
    except OutboundRefusedError as error:
        raise MessengerUnavailableError(f"{messenger} cannot be called: {error.message} "
                                        "Check the messenger's API URL in the configuration.") from None
    except OutboundError as error:
        raise MessengerUnavailableError(f"{messenger} could not be reached ({_after_colon(error.message)}); "
                                        "nothing was changed, try again later.") from None


def unavailable(messenger: str, response: OutboundResponse) -> MessengerUnavailableError:
    """A messenger that answered, but not in its protocol (5xx, a proxy's HTML page, ...)."""
    return MessengerUnavailableError(f"{messenger} answered HTTP {response.status} without a usable "
                                     "answer; nothing was changed, try again later.")


def refused(messenger: str, param: str, what: str, description: Any,
            secrets: Iterable[str] = ()) -> InvalidParamsError:
    """The messenger said no: ``invalid_params`` naming the setting and quoting the messenger."""
    quoted = quote(description, secrets)
    return InvalidParamsError(f"{messenger} refused {what}: {quoted}",
                              data={"param": param, "messenger_error": quoted})


def quote(description: Any, secrets: Iterable[str] = ()) -> str:
    """A messenger's own error text, safe to show: secrets masked, one line, bounded."""
    text = description if isinstance(description, str) else str(description or "no description")
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[secret]")
    text = re.sub(r"\s+", " ", text).strip() or "no description"
    return text if len(text) <= MAX_QUOTE else text[:MAX_QUOTE - 1] + "…"


def _after_colon(message: str) -> str:
    """'Outbound call to host:443 failed: timed out.' -> 'timed out'."""
    return message.rsplit(": ", 1)[-1].rstrip(".")
