"""Browser tests of the console: a real Chromium (Debian's, driven by Playwright) against a real
Baton server on SQLite. Nothing downloads a browser. Without Chromium they skip locally and fail
under CI=true."""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from tests.fakes.telegram import FakeTelegram
from tests.fakes.viber import FakeViber
from tests.fakes.whatsapp import FakeWhatsApp
from tests.harness import BatonServer

CHROMIUM = os.environ.get("BATON_TEST_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
BPMN = Path(__file__).resolve().parent / "bpmn"
DOCS_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def _missing(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"The console's browser tests must run under CI=true: {reason}")
    pytest.skip(f"Console browser tests skipped: {reason} (apt-get install chromium)")


@pytest.fixture(scope="session")
def chromium():
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        _missing(f"no Chromium at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed (make install)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def messenger_fakes():
    """Local fakes of Telegram's, Viber's and WhatsApp's APIs: a channel form's create call reaches
    them, never the real messengers."""
    fakes = (FakeTelegram().start(), FakeViber().start(), FakeWhatsApp().start())
    yield fakes
    for fake in fakes:
        fake.stop()


@pytest.fixture(scope="session")
def console_server(tmp_path_factory, messenger_fakes):
    """One server for the browser tests; deliveries give up within seconds (dead letters)."""
    workdir = tmp_path_factory.mktemp("console-server")
    telegram, viber, whatsapp = messenger_fakes
    server = BatonServer(f"sqlite:///{workdir / 'baton.db'}", workdir, BATON_DELIVERY_RETRY_SCALE="0.00001",
                         BATON_TELEGRAM_API_URL=telegram.api_url, BATON_VIBER_API_URL=viber.api_url,
                         BATON_WHATSAPP_API_URL=whatsapp.api_url).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tenant_key(console_server) -> str:
    return console_server.create_tenant(f"acme-{uuid.uuid4().hex[:6]}")


@pytest.fixture
def api(console_server, tenant_key):
    return console_server.api(tenant_key)


@pytest.fixture(scope="session")
def shots(tmp_path_factory):
    """Saves screenshots under pytest's tmp dir; with BATON_CONSOLE_SHOTS=1 the chosen ones also go
    to docs/console/ (so an ordinary test run leaves the repository as it was)."""
    folder = tmp_path_factory.mktemp("console-shots")
    publish = os.environ.get("BATON_CONSOLE_SHOTS") == "1"

    def shot(page, name: str, *, best: bool = False) -> Path:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path))
        if best and publish:
            DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, DOCS_SHOTS / f"{name}.png")
        return path

    shot.folder = folder
    return shot


class Console:
    """One browser tab on the console, recording every CSP violation and script error it sees."""

    def __init__(self, page, base_url: str):
        self.page = page
        self.base_url = base_url
        self.errors: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))
        page.on("console", lambda message: self.errors.append(f"console: {message.text}")
                if message.type == "error" else None)
        # Every CSP violation the page meets is kept on window (an inline handler that ran would
        # set window.__xss; one that CSP stopped would show up here).
        page.add_init_script("window.__csp = []; document.addEventListener('securitypolicyviolation',"
                             " (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));")

    def open(self, hash_: str = "#/"):
        self.page.goto(f"{self.base_url}/console/{hash_}")
        return self

    def go(self, hash_: str):
        self.page.evaluate("(h) => { location.hash = h; }", hash_)
        return self

    def sign_in(self, key: str):
        self.open()
        self.page.get_by_label("API key").fill(key)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_selector("#nav a")
        self.page.get_by_role("heading", name="Dashboard").wait_for()
        return self

    def violations(self) -> list[str]:
        return self.page.evaluate("window.__csp")

    def assert_clean(self):
        assert self.violations() == [], self.violations()
        assert self.page.evaluate("window.__xss") is None
        # (a refused call's HTTP status is logged by Chromium as "Failed to load resource")
        assert [e for e in self.errors if "Failed to load resource" not in e] == []


@pytest.fixture
def console(chromium, console_server):
    context = chromium.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.set_default_timeout(15_000)
    tab = Console(page, console_server.base_url)
    yield tab
    context.close()


@pytest.fixture
def phone(chromium, console_server):
    context = chromium.new_context(viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(15_000)
    tab = Console(page, console_server.base_url)
    yield tab
    context.close()


def bpmn_file(name: str, **replacements: str) -> str:
    text = (BPMN / name).read_text(encoding="utf-8")
    for key, value in replacements.items():
        text = text.replace(f"__{key.upper()}__", value)
    return text
