"""What the ``ai_chat`` step asks a model and what it gets back, whichever provider answers.

The engine builds an ``AiRequest`` from the step (prompt, knowledge, model) and the conversation,
and sends the ``Reply`` to the customer, or hands the conversation to an operator when ``handoff``
is set. A provider that fails for good raises ``ProviderError``.
"""
from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Protocol

BUILTIN = "builtin"
MAX_REPLY_CHARS = 10_000   # a longer answer is cut, ending with "…"


@dataclass(frozen=True)
class Turn:
    """One message of the conversation.

    ``role`` is "user" for the customer and "assistant" for whoever spoke to the customer: the AI,
    an operator or the process."""

    role: str
    text: str


@dataclass(frozen=True)
class AiRequest:
    """One question to a model: the step's prompt and knowledge, and the conversation so far.

    ``history`` is oldest first and ends with the customer's unanswered message(s). ``model`` is
    the step's ``model`` property; it overrides the configured default model."""

    system_prompt: str
    knowledge: str
    history: tuple[Turn, ...]
    model: str | None = None
    handoff_groups: tuple[str, ...] = ()  # the operator groups a handoff may name


@dataclass(frozen=True)
class Reply:
    """The answer for the customer; ``text`` may be empty only when the model hands off."""

    text: str
    handoff: bool = False
    reason: str | None = None
    group: str | None = None  # the operator group the model handed over to (one of the request's)


def clip_reply(text: str) -> str:
    """``text`` cut to ``MAX_REPLY_CHARS`` characters, the last one "…" when it was cut; a lone
    surrogate (JSON can carry ``\\ud800``, no UTF-8 body can) becomes U+FFFD."""
    text = _SURROGATE.sub("\ufffd", text)
    return text if len(text) <= MAX_REPLY_CHARS else text[:MAX_REPLY_CHARS - 1] + "…"


_SURROGATE = re.compile("[\ud800-\udfff]")


class ProviderError(Exception):
    """A model call failed for good, after the client's own retries.

    ``message`` is shown to process admins: it never holds an API key, a traceback, or a URL
    beyond ``scheme://host:port``. ``retryable`` says that the same call may succeed later
    (a timeout, an unreachable server, a rate limit or a 5xx)."""

    def __init__(self, message: str, *, retryable: bool = False):
        self.message = message
        self.retryable = retryable
        super().__init__(message)


class Provider(Protocol):
    """Answers an ``AiRequest``; may be called from several worker threads at once."""

    name: str            # "builtin" or "openai-compatible"
    max_seconds: float   # the longest one answer() can take, retries and backoff included

    def answer(self, request: AiRequest) -> Reply: ...
