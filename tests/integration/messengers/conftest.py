"""Fixtures of the messenger tests: local fakes of Telegram's, Viber's and WhatsApp's APIs (and of an
OpenAI-compatible model), and, per backend, a real server configured to call them.

The fakes live for the whole session and are shared by the tests; each test makes its own bot,
account or number (and its own chat ids), so what a fake recorded is told apart by those.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from tests.conftest import make_database_url
from tests.fake_openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.fakes.viber import FakeViber
from tests.fakes.whatsapp import FakeWhatsApp
from tests.harness import BatonServer, drop_postgres_database

MODEL_KEY = "sk-test-" + uuid.uuid4().hex


@dataclass
class Fakes:
    telegram: FakeTelegram
    viber: FakeViber
    whatsapp: FakeWhatsApp
    model: FakeOpenAI

    def environment(self) -> dict[str, str]:
        """The server's configuration that points it at the fakes."""
        return {"BATON_TELEGRAM_API_URL": self.telegram.api_url, "BATON_VIBER_API_URL": self.viber.api_url,
                "BATON_WHATSAPP_API_URL": self.whatsapp.api_url, "BATON_AI_BASE_URL": self.model.base_url,
                "BATON_AI_MODEL": "fake-model", "BATON_AI_API_KEY": MODEL_KEY}


@pytest.fixture(scope="session")
def fakes():
    started = Fakes(FakeTelegram().start(), FakeViber().start(), FakeWhatsApp().start(),
                    FakeOpenAI(api_key=MODEL_KEY).start())
    yield started
    for fake in (started.telegram, started.viber, started.whatsapp, started.model):
        fake.stop()


@pytest.fixture(scope="session")
def messenger_server(backend, tmp_path_factory, fakes):
    """A server of its own (BATON_PUBLIC_URL on 127.0.0.1, private URLs allowed, fast retries)."""
    url = make_database_url(backend, tmp_path_factory)
    server = BatonServer(url, tmp_path_factory.mktemp("messenger-server"), BATON_DELIVERY_RETRY_SCALE="0.01",
                         **fakes.environment()).start()
    yield server
    server.stop()
    if backend == "postgresql":
        drop_postgres_database(url)


@pytest.fixture(scope="session")
def mapi(messenger_server):
    return messenger_server.api(messenger_server.create_tenant(f"messengers-{uuid.uuid4().hex[:8]}"))


@pytest.fixture(scope="session")
def other_mapi(messenger_server):
    return messenger_server.api(messenger_server.create_tenant(f"others-{uuid.uuid4().hex[:8]}"))


@pytest.fixture
def idle(mapi):
    """Nothing of an earlier test still running (a retry of its delivery could take a scripted answer)."""
    mapi.wait_until_idle()
    return mapi
