"""The OpenAI-compatible provider: the ``ai_chat`` step answered by a chat-completions endpoint.

Any server that speaks OpenAI's ``POST /v1/chat/completions`` will do (OpenAI, vLLM, Ollama,
LM Studio, llama.cpp's server, ...). Each provider builds one ``openai.OpenAI`` client and shares it
between the worker threads (the client is thread-safe).

* **The request**: one system message (the step's prompt, then "Use this knowledge to answer:" and
  the knowledge, then one sentence on handing off), the conversation as user/assistant messages,
  and the ``handoff_to_operator`` tool. A call of that tool is a handoff, with the tool's
  ``reason`` when its arguments parse.
* **Servers without tools**: some refuse a request that carries ``tools`` with HTTP 400. The
  request is then sent once more without tools (and without the handoff sentence); when that
  succeeds, the provider remembers that this endpoint has no tools and sends none from then on.
  Such a model cannot hand off: it only answers.
* **Retries** are the client's own (``max_retries``, with backoff): timeouts, connection errors,
  408/409/429/5xx. A server's ``Retry-After`` is honoured only up to the client's own backoff cap
  (8 s); a longer one is dropped so that ``max_seconds`` stays a true bound.
* **Errors** become ``ProviderError`` where they appear. Its message names the server by
  ``scheme://host:port`` only and never repeats the server's error text (OpenAI's 401 text quotes
  the API key); the openai exception is not chained (``from None``) for the same reason.
"""
from __future__ import annotations

import json
import math
import threading
from typing import Any
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletion

from ai.types import AiRequest, ProviderError, Reply, clip_reply

NAME = "openai-compatible"
HANDOFF_TOOL = "handoff_to_operator"
KNOWLEDGE_HEADING = "Use this knowledge to answer:"
HANDOFF_SENTENCE = (f"When the customer asks for a person, or when you cannot help, call the "
                    f"{HANDOFF_TOOL} tool (you may also write a short message for the customer).")
TOOLS: tuple[dict[str, Any], ...] = ({
    "type": "function",
    "function": {
        "name": HANDOFF_TOOL,
        "description": "Pass the conversation to a human operator: when the customer asks for a "
                       "person, or when you cannot help with their request.",
        "parameters": {
            "type": "object",
            "properties": {
                "reason": {"type": "string", "description": "Why an operator is needed, in a few words."},
            },
            "required": [],
        },
    },
},)
NO_MODEL = "No model is configured: set BATON_AI_MODEL or the step's model property."
BACKOFF_CAP_S = 8.0        # openai's MAX_RETRY_DELAY: the longest sleep of the client's own backoff
_MAX_REASON_CHARS = 500


_REQUEST_OPTIONS = {"security": {"bearer_auth": True}}  # as chat.completions.create sends it


class OpenAICompatibleProvider:
    """Answers through one chat-completions endpoint; ``model`` is the default model."""

    name = NAME

    def __init__(self, *, base_url: str, model: str | None, api_key: str | None,
                 timeout_s: float = 30.0, retries: int = 2):
        if not timeout_s > 0 or retries < 0:
            raise ValueError("timeout_s must be > 0 and retries >= 0")
        self.model = model or None
        self.timeout_s = timeout_s
        self.origin = origin_of(base_url)
        # One attempt is a connect (<= timeout_s) and then the wait for the answer (<= timeout_s):
        # the client's timeout bounds each phase, not their sum. Between attempts the client sleeps
        # at most BACKOFF_CAP_S (longer Retry-Afters are dropped below). 1 s covers sending the
        # request. A server that trickles its answer byte by byte can still outlast this bound.
        self.max_seconds = (retries + 1) * 2 * timeout_s + retries * BACKOFF_CAP_S + 1.0
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=retries,
            http_client=openai.DefaultHttpxClient(event_hooks={"response": [_drop_long_retry_after]}))
        self._tools_refused = threading.Event()    # set once: this endpoint answers 400 to tools

    def close(self) -> None:
        self._client.close()

    def answer(self, request: AiRequest) -> Reply:
        model = request.model or self.model
        if not model:
            raise ProviderError(NO_MODEL)
        if not self._tools_refused.is_set():
            completion = self._create(model, request, tools_for(request))
            if completion is not None:
                return self._reply(completion, request)
        reply = self._reply(self._create(model, request, ()), request)
        self._tools_refused.set()       # only once a request without tools has been answered
        return reply

    def _create(self, model: str, request: AiRequest, tools: tuple[dict[str, Any], ...]) -> Any:
        """The completion; None when the server refused the tools (HTTP 400) and may take none."""
        body: dict[str, Any] = {"model": model, "messages": build_messages(request, tools)}
        if tools:
            body.update(tools=list(tools), tool_choice="auto")
        try:
            # The client's generic POST with the body chat.completions.create would send: create()
            # first walks every parameter through its TypedDict transform, ~40 % of the client's
            # CPU per turn (on every chat answer's path), for a body that is plain JSON already.
            # Same endpoint, auth, retries, timeouts, errors and ChatCompletion parsing.
            return self._client.post("/chat/completions", body=body, cast_to=ChatCompletion,
                                     options=_REQUEST_OPTIONS)
        except openai.BadRequestError:
            if tools:
                return None
            raise self._error_for(400, model) from None
        except openai.APITimeoutError:
            raise ProviderError(f"The model at {self.origin} did not answer within {self.timeout_s:g} s.",
                                retryable=True) from None
        except openai.APIConnectionError:
            raise ProviderError(f"The model at {self.origin} could not be reached.", retryable=True) from None
        except openai.APIStatusError as exc:
            raise self._error_for(exc.status_code, model) from None
        except (openai.OpenAIError, ValueError):     # ValueError: a body that is not JSON
            raise self._not_a_completion() from None

    def _error_for(self, status: int, model: str) -> ProviderError:
        at = f"The model at {self.origin}"
        if status in (401, 403):
            return ProviderError(f"{at} refused the API key (HTTP {status}).")
        if status == 404:
            return ProviderError(f"{at} does not know the model '{model[:100]}' (HTTP 404): "
                                 f"check the model name and the base URL.")
        return ProviderError(f"{at} answered HTTP {status}.",
                             retryable=status in (408, 409, 429) or status >= 500)

    def _not_a_completion(self) -> ProviderError:
        return ProviderError(f"The model at {self.origin} sent an answer that is not a chat completion.")

    def _reply(self, completion: Any, request: AiRequest) -> Reply:
        try:
            message = completion.choices[0].message
            content = (message.content or "").strip()
            calls = list(message.tool_calls or ())
        except (AttributeError, IndexError, TypeError):
            raise self._not_a_completion() from None
        for call in calls:
            function = getattr(call, "function", None)
            if getattr(function, "name", None) == HANDOFF_TOOL:
                return Reply(clip_reply(content), handoff=True, reason=_reason(function.arguments),
                             group=_group(function.arguments, request.handoff_groups))
        if not content:
            raise ProviderError("The model answered with no text.")
        return Reply(clip_reply(content))


def tools_for(request: AiRequest) -> tuple[dict[str, Any], ...]:
    """``TOOLS``; when the step names groups to hand over to (``handoff_groups``), the handoff tool
    also takes ``group``, one of them."""
    if not request.handoff_groups:
        return TOOLS
    function = TOOLS[0]["function"]
    parameters = {**function["parameters"], "properties": {
        **function["parameters"]["properties"],
        "group": {"type": "string", "enum": list(request.handoff_groups),
                  "description": "The team of operators that can help with this request."}}}
    return ({"type": "function", "function": {**function, "parameters": parameters}},)


def build_messages(request: AiRequest, tools: tuple[dict[str, Any], ...]) -> list[dict[str, str]]:
    """The chat messages for ``request``; the handoff sentence only when the tool is offered."""
    system = [request.system_prompt.strip()] if request.system_prompt.strip() else []
    if request.knowledge.strip():
        system.append(f"{KNOWLEDGE_HEADING}\n{request.knowledge.strip()}")
    if any(tool["function"]["name"] == HANDOFF_TOOL for tool in tools):
        system.append(HANDOFF_SENTENCE)
    messages = [{"role": "system", "content": "\n\n".join(system)}] if system else []
    messages += [{"role": "user" if turn.role == "user" else "assistant", "content": turn.text}
                 for turn in request.history]
    return messages


def origin_of(url: str) -> str:
    """``scheme://host:port`` of ``url``: what an error message may say about a server."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return "the configured URL"
    if not parts.scheme or not host:
        return "the configured URL"
    host = f"[{host}]" if ":" in host else host
    port = port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def _group(arguments: str | None, groups: tuple[str, ...]) -> str | None:
    """The group a handoff names, if it is one the step offered."""
    try:
        parsed = json.loads(arguments or "")
    except (ValueError, TypeError):
        return None
    group = parsed.get("group") if isinstance(parsed, dict) else None
    return group if isinstance(group, str) and group in groups else None


def _reason(arguments: str | None) -> str | None:
    try:
        parsed = json.loads(arguments or "")
    except (ValueError, TypeError):
        return None
    reason = parsed.get("reason") if isinstance(parsed, dict) else None
    if not isinstance(reason, str) or not reason.strip():
        return None
    return reason.strip()[:_MAX_REASON_CHARS]


def _drop_long_retry_after(response: Any) -> None:
    """An httpx response hook: the client would sleep up to 2 minutes on a server's Retry-After,
    beyond ``max_seconds``; such a header is dropped so that the client's own backoff applies."""
    headers = response.headers
    for name, per_second in (("retry-after-ms", 1000), ("retry-after", 1)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / per_second
        except ValueError:
            seconds = math.inf          # an HTTP date: could be any time away
        if not 0 <= seconds <= BACKOFF_CAP_S:
            headers.pop("retry-after-ms", None)
            headers.pop("retry-after", None)
            return
