"""Model providers of the ``ai_chat`` step: the built-in retrieval and an OpenAI-compatible endpoint.

A leaf package: it imports neither ``engine/``, ``rpc/``, ``channels/``, Flask nor SQLAlchemy.
"""
from ai.providers import build_provider
from ai.types import BUILTIN, AiRequest, Provider, ProviderError, Reply, Turn

__all__ = ["BUILTIN", "AiRequest", "Provider", "ProviderError", "Reply", "Turn", "build_provider"]
