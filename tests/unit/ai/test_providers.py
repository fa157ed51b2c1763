"""ai/providers.py: which provider answers, and what a missing extra says."""
from __future__ import annotations

import sys

import pytest

from ai import BUILTIN, build_provider
from ai.providers import MISSING_OPENAI


def test_without_a_base_url_the_builtin_answers_and_openai_is_not_needed(monkeypatch):
    monkeypatch.delitem(sys.modules, "ai.openai_compatible", raising=False)
    monkeypatch.setitem(sys.modules, "openai", None)  # what Python does for a package not installed
    provider = build_provider(base_url=None, model=None, api_key=None)
    assert provider.endpoint is None and provider.name == BUILTIN


def test_a_base_url_without_the_openai_package_names_the_extra_to_install(monkeypatch):
    monkeypatch.delitem(sys.modules, "ai.openai_compatible", raising=False)
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ModuleNotFoundError) as caught:
        build_provider(base_url="http://127.0.0.1:9/v1", model="m", api_key=None)
    assert str(caught.value) == MISSING_OPENAI
    assert "BATON_AI_BASE_URL" in str(caught.value) and "`ai` extra" in str(caught.value)
    assert caught.value.name == "openai" and caught.value.__cause__ is None
