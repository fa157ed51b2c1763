"""Secrets at rest (issue 29, INTERFACE §5.10), SQLite and PostgreSQL, through a real server: a dump of
every table's bytes shows none of them; a wrong or missing key refuses to start, saying what to do;
the embedded default's key file; ``flask --app app secrets rotate`` while the server runs."""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests.fakes.telegram import FakeTelegram
from tests.harness import ROOT, BatonServer, bpmn

UNREACHABLE = "http://127.0.0.1:9/hook"  # nothing listens: the deliveries wait, secrets and all


def new_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


@pytest.fixture(scope="module")
def telegram():
    fake = FakeTelegram().start()
    yield fake
    fake.stop()


def start(own_database, workdir: Path, **env: str) -> BatonServer:
    return BatonServer(own_database, workdir, BATON_DELIVERY_RETRY_SCALE="50", **env).start()


def dump(database_url: str, workdir: Path) -> bytes:
    """Every byte of every table: the SQLite file with its WAL, or each PostgreSQL row as text."""
    if database_url.startswith("sqlite:///"):
        path = Path(database_url.removeprefix("sqlite:///"))
        return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())
    import psycopg

    with psycopg.connect(database_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]
        chunks = []
        for table in tables:
            chunks += [row[0] for row in conn.execute(f'SELECT CAST(t AS text) FROM "{table}" t')]
    return "\n".join(chunks).encode()


def signed_start(server: BatonServer, webhook_url: str, secret: str) -> requests.Response:
    body = b'{"amount": 5}'
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    path = "/webhooks/inbound/" + webhook_url.rsplit("/", 1)[1]  # on this server (its port)
    return requests.post(server.base_url + path, data=body, headers={"Content-Type": "application/json",
                                                          "X-Baton-Signature": signature}, timeout=10)


def secrets_everywhere(server: BatonServer, telegram: FakeTelegram) -> dict[str, str]:
    """A tenant with a secret of every kind stored: a Telegram channel (its bot token and the secret
    token Baton made), a web-chat channel's secret and a delivery queued with it, a webhook's secret."""
    api = server.api(server.create_tenant(f"sealed-{uuid.uuid4().hex[:8]}"))
    token = telegram.add_bot("Sealed", username=f"sealed_{uuid.uuid4().hex[:8]}_bot")
    api.call("channel.create", type="telegram", name="tg", settings={"bot_token": token})
    chat_secret = "webchat-" + uuid.uuid4().hex
    channel = api.call("channel.create", type="webchat", name="site", webhook_url=UNREACHABLE,
                       webhook_secret=chat_secret)
    api.deploy(bpmn("chat_reply.bpmn").replace("__CHANNEL__", str(channel["config_id"])), code="echo")
    key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    answer = requests.post(f"{server.base_url}/channels/webchat/{channel['config_id']}/inbound",
                           json={"chat_id": "c-1", "text": "hello"}, headers={"X-API-Key": key}, timeout=10)
    assert answer.status_code == 202, answer.text
    deployed = api.deploy(bpmn("webhook_order.bpmn"), code="order")
    webhook = deployed["webhooks"][0]
    hook_secret = "hook-" + uuid.uuid4().hex
    api.call("webhook.update", webhook_id=webhook["webhook_id"], secret=hook_secret)
    api.wait_until_idle()
    return {"bot_token": token, "secret_token": telegram.webhooks[token]["secret_token"],
            "webchat": chat_secret, "webhook": hook_secret, "webhook_url": webhook["url"]}


def test_a_dump_of_every_table_shows_none_of_the_secrets(own_database, tmp_path, telegram):
    server = start(own_database, tmp_path, BATON_SECRET_KEY=new_key(), BATON_TELEGRAM_API_URL=telegram.api_url)
    try:
        secrets = secrets_everywhere(server, telegram)
        assert signed_start(server, secrets["webhook_url"], secrets["webhook"]).status_code == 202
        assert signed_start(server, secrets["webhook_url"], "wrong-" + secrets["webhook"]).status_code == 401
        data = dump(own_database, tmp_path)
        assert b"bsk1:" in data  # sealed values are there ...
        for name in ("bot_token", "secret_token", "webchat", "webhook"):
            assert secrets[name].encode() not in data, f"the {name} is readable in the database"
        # ... and what is sealed still works: the queued delivery is the web-chat's, waiting to retry.
    finally:
        server.stop()


def test_a_wrong_or_missing_key_refuses_to_start_and_says_what_to_do(own_database, tmp_path, telegram):
    key = new_key()
    server = start(own_database, tmp_path, BATON_SECRET_KEY=key, BATON_TELEGRAM_API_URL=telegram.api_url)
    try:
        secrets = secrets_everywhere(server, telegram)
    finally:
        server.stop()
    key_file = tmp_path / "absent" / "secret.key"
    for env in ({"BATON_SECRET_KEY": new_key()}, {"BATON_SECRET_KEY": "", "BATON_SECRET_KEY_FILE": str(key_file)},
                {"BATON_SECRET_KEY": "not-a-key"}):
        with pytest.raises(RuntimeError) as refused:
            start(own_database, tmp_path, **env)
        message = str(refused.value)
        assert "BATON_SECRET_KEY" in message and "Traceback" not in message
        assert "Security model" in message or "secrets new-key" in message
    assert not key_file.exists()  # no new key beside a database that needs the old one
    again = start(own_database, tmp_path, BATON_SECRET_KEY=key)
    try:
        assert signed_start(again, secrets["webhook_url"], secrets["webhook"]).status_code == 202
    finally:
        again.stop()


def test_the_embedded_default_creates_its_key_file_with_mode_0600_and_says_so(own_database, tmp_path):
    key_file = tmp_path / "instance" / "secret.key"
    server = start(own_database, tmp_path, BATON_SECRET_KEY="", BATON_SECRET_KEY_FILE=str(key_file))
    try:
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert f"Created the secret key file {key_file}" in server.output()
        written = key_file.read_text()
    finally:
        server.stop()
    second = start(own_database, tmp_path, BATON_SECRET_KEY="", BATON_SECRET_KEY_FILE=str(key_file))
    try:
        assert key_file.read_text() == written
        assert "Created the secret key file" not in second.output()  # the second start uses it
    finally:
        second.stop()


def test_secrets_rotate_reseals_under_a_new_key_while_the_server_runs(own_database, tmp_path, telegram):
    key_file = tmp_path / "keys" / "secret.key"
    env = {"BATON_SECRET_KEY": "", "BATON_SECRET_KEY_FILE": str(key_file), "BATON_TELEGRAM_API_URL": telegram.api_url}
    server = start(own_database, tmp_path, **env)
    try:
        secrets = secrets_everywhere(server, telegram)
        old = key_file.read_text().split()
        rotated = subprocess.run([sys.executable, "-m", "flask", "--app", "app", "secrets", "rotate"], cwd=ROOT,
                                 env=server.env, capture_output=True, text=True, timeout=120)
        assert rotated.returncode == 0, rotated.stderr
        keys = key_file.read_text().split()
        assert len(keys) == 2 and keys[1] == old[0] and keys[0] != old[0]
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert "Sealed" in rotated.stdout
        # The running server opens what was sealed under the new key, and seals with it.
        assert signed_start(server, secrets["webhook_url"], secrets["webhook"]).status_code == 202
        data = dump(own_database, tmp_path)
        new_id = rotated.stdout.split("under key ")[1].split(".")[0]
        assert f"bsk1:{new_id}:".encode() in data
        for name in ("bot_token", "secret_token", "webchat", "webhook"):
            assert secrets[name].encode() not in data
    finally:
        server.stop()
    # The old key alone no longer opens this database.
    with pytest.raises(RuntimeError, match="BATON_SECRET_KEY"):
        start(own_database, tmp_path, BATON_SECRET_KEY=old[0])
    restarted = start(own_database, tmp_path, **env)
    restarted.stop()


def test_a_rotation_killed_at_any_point_leaves_every_secret_readable(own_database, tmp_path, telegram):
    """``kill -9`` of ``secrets rotate`` part-way (at fractions of a whole rotation's time): the key
    file always holds every key the database uses, the running server keeps working, a restart starts."""
    key_file = tmp_path / "keys" / "secret.key"
    env = {"BATON_SECRET_KEY": "", "BATON_SECRET_KEY_FILE": str(key_file), "BATON_TELEGRAM_API_URL": telegram.api_url}
    server = start(own_database, tmp_path, **env)
    command = [sys.executable, "-m", "flask", "--app", "app", "secrets", "rotate"]
    try:
        secrets = secrets_everywhere(server, telegram)
        began = time.monotonic()
        whole = subprocess.run(command, cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - began
        assert whole.returncode == 0, whole.stderr
        for fraction in (0.3, 0.6, 0.85, 0.95):
            process = subprocess.Popen(command, cwd=ROOT, env=server.env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            time.sleep(took * fraction)
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
            assert signed_start(server, secrets["webhook_url"], secrets["webhook"]).status_code == 202, fraction
    finally:
        server.stop()
    data = dump(own_database, tmp_path)
    assert secrets["webhook"].encode() not in data and secrets["bot_token"].encode() not in data
    restarted = start(own_database, tmp_path, **env)
    try:
        assert signed_start(restarted, secrets["webhook_url"], secrets["webhook"]).status_code == 202
    finally:
        restarted.stop()

