"""``build_provider``: the provider the ``ai_chat`` step talks to, chosen from the configuration.

Without a base URL every step is answered by the built-in (retrieval over the step's knowledge).
With one, a step is answered by the OpenAI-compatible endpoint with the step's ``model`` or else
the configured default, and by the built-in when that model is "builtin".
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ai.builtin import BuiltinProvider
from ai.types import BUILTIN, AiRequest, Reply

if TYPE_CHECKING:
    from ai.openai_compatible import OpenAICompatibleProvider

MISSING_OPENAI = ("BATON_AI_BASE_URL is set, which needs the openai package, and it is not installed: "
                  "install Baton's `ai` extra (pyproject.toml; `make install` installs every extra).")


class RoutedProvider:
    """Sends each request to the built-in or to the endpoint, by the model it names."""

    def __init__(self, builtin: BuiltinProvider, endpoint: OpenAICompatibleProvider | None):
        self.builtin = builtin
        self.endpoint = endpoint
        if endpoint is None:
            self.name, self.max_seconds = builtin.name, builtin.max_seconds
        else:
            self.name = builtin.name if endpoint.model == BUILTIN else endpoint.name
            self.max_seconds = max(endpoint.max_seconds, builtin.max_seconds)

    def answer(self, request: AiRequest) -> Reply:
        if self.endpoint is None or (request.model or self.endpoint.model) == BUILTIN:
            return self.builtin.answer(request)
        return self.endpoint.answer(request)

    def close(self) -> None:
        """Closes the endpoint's HTTP connections; call it once, when the process stops."""
        if self.endpoint is not None:
            self.endpoint.close()


def build_provider(*, base_url: str | None, model: str | None, api_key: str | None,
                   timeout_s: float = 30.0, retries: int = 2) -> RoutedProvider:
    """The provider for this configuration; a Provider that also has ``close()``."""
    endpoint = None
    if base_url:
        try:  # here, not at the top: the openai package takes 0.5 s to import, and it is an extra
            from ai.openai_compatible import OpenAICompatibleProvider
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] != "openai":
                raise
            raise ModuleNotFoundError(MISSING_OPENAI, name="openai") from None
        endpoint = OpenAICompatibleProvider(base_url=base_url, model=model, api_key=api_key,
                                            timeout_s=timeout_s, retries=retries)
    return RoutedProvider(BuiltinProvider(), endpoint)
