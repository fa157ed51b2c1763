"""Fixtures for the messenger protocol tests: a real SSRF-guarded client allowed to reach 127.0.0.1,
the messenger fakes, and a receiver standing in for Baton's inbound endpoints."""
from __future__ import annotations

import pytest

from engine.outbound import OutboundHttp
from tests.fakes.telegram import FakeTelegram
from tests.fakes.viber import FakeViber
from tests.fakes.whatsapp import FakeWhatsApp
from tests.fakes.server import Recorder


@pytest.fixture
def http():
    with OutboundHttp(allow_private=True, timeout_s=5.0) as client:
        yield client


@pytest.fixture
def telegram_fake():
    with FakeTelegram() as fake:
        yield fake


@pytest.fixture
def viber_fake():
    with FakeViber() as fake:
        yield fake


@pytest.fixture
def whatsapp_fake():
    with FakeWhatsApp() as fake:
        yield fake


@pytest.fixture
def baton():
    """Where the messenger fakes send inbound calls; answers 200 like Baton's endpoints."""
    with Recorder() as recorder:
        yield recorder
