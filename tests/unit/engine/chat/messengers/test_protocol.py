"""A fourth messenger needs only its own ``Messenger``: registered in a registry of its own, it is
connected, verified, parsed, answered and judged by the same caller code as Telegram, Viber and
WhatsApp (channel_configs, inbound_calls, messenger_deliveries, the delivery runner), on a real
database and against a real HTTP server standing in for its API."""
from __future__ import annotations

import json
import re
import secrets
import uuid

import pytest
from flask import current_app
from sqlalchemy import select

from engine.auth import create_tenant
from engine.chat import channel_configs, inbound_calls, messenger_deliveries, reachability
from engine.chat.messengers.connection import Connection, webhook_url
from engine.chat.messengers.items import (UNREACHABLE, InboundEvent, InboundMessage, as_dict, as_text, header,
                                          hmac_sha256_hex, load_json_object, same_secret)
from engine.chat.messengers.protocol import Addressed, InboundCall, Messenger
from engine.chat.messengers.registry import MESSENGERS, registry
from engine.chat.messengers.sending import DEAD, RETRY, SENT, HttpRequest, OutboundCall, SendOutcome, answer_object
from engine.chat.messengers.settings import SettingsSpec, token_setting
from engine.errors import UnauthorizedError
from engine.outbound import OutboundHttp
from engine.jobs.worker import run_job
from engine.outbound.delivery_runner import DeliveryRunner
from engine.store.models import Channel, Delivery, InboundReceipt
from engine.store.unit_of_work import SYSTEM, run_steps
from tests.fakes.server import FakeServer, Recorded, Reply, encode
from tests.unit.conftest import claim

WORKER = "unit-worker"


class Echo(Messenger):
    """A made-up messenger: ``GET /me`` checks the token, ``PUT /webhook`` registers, its calls carry
    the channel's key in ``X-Echo-Channel`` and an HMAC of the body in ``X-Echo-Signature``."""

    type, name = "echo", "Echo"
    settings_spec = SettingsSpec("echo", (token_setting("token", "an Echo token"),))

    def connect(self, http, settings, public_url, *, api_url):
        token = self.settings_spec.check(settings)["token"]
        me = answer_object(http.request("GET", f"{api_url}/me", headers={"Authorization": token}))
        key = secrets.token_hex(8)
        url = webhook_url(public_url, "/webhooks/echo", channel=key)
        http.request("PUT", f"{api_url}/webhook", headers={"Authorization": token}, body=url.encode())
        return Connection(bot_id=me["id"], bot_name=me["name"], webhook_url=url, inbound_key=key)

    def registered_webhook(self, http, settings, *, api_url):
        answer = http.request("GET", f"{api_url}/webhook", headers={"Authorization": settings["token"]})
        return as_text(as_dict(answer_object(answer)).get("url"))

    def disconnect(self, http, settings, *, api_url):
        http.request("DELETE", f"{api_url}/webhook", headers={"Authorization": settings["token"]})

    def addressed(self, call):
        key = header(call.headers, "X-Echo-Channel")
        return Addressed((key,) if key else ())

    def verifying_secret(self, settings, webhook_secret):
        return settings.get("token")

    def verify(self, call, secret):
        return same_secret(header(call.headers, "X-Echo-Signature"), hmac_sha256_hex(secret, call.body))

    def parse(self, body):
        sent = load_json_object(body, self.name)
        if "blocked" in sent:
            return [InboundEvent(channel=self.type, kind=UNREACHABLE, event="blocked", dedup_id=sent["id"],
                                 chat_id=sent["blocked"], reason="the user left Echo")]
        return [InboundMessage(channel=self.type, dedup_id=sent["id"], chat_id=sent["chat"], user_id=sent["chat"],
                               display_name=None, text=sent["text"])]

    def button_refusals(self, buttons):
        return ["Echo has no buttons."] if buttons else []

    def calls(self, chat_id, text, buttons=(), media=None):
        return [OutboundCall("say", {"to": chat_id, "text": text})]

    def request(self, settings, outbound, *, api_url):
        return HttpRequest("POST", f"{api_url}/{outbound.method}", {"Authorization": settings["token"]},
                           json.dumps(outbound.payload).encode())

    def classify(self, response):
        answer = as_dict(answer_object(response))
        if response.status == 200:
            return SendOutcome(SENT, message_id=as_text(answer.get("id")))
        return SendOutcome(DEAD if response.status == 403 else RETRY, reason=as_text(answer.get("error")))


class FakeEcho(FakeServer):
    label = "echo"

    def __init__(self):
        super().__init__()
        self.webhook: str | None = None
        self.said: list[dict] = []

    def respond(self, request: Recorded) -> Reply:
        with self._lock:
            if request.path == "/me":
                return Reply(200, {"id": "echo-bot-1", "name": "Echo Bot"})
            if request.path == "/webhook" and request.method == "PUT":
                self.webhook = request.body.decode()
            elif request.path == "/webhook" and request.method == "DELETE":
                self.webhook = None
            elif request.path == "/say":
                said = json.loads(request.body)
                if said["to"] == "gone":
                    return Reply(403, {"error": "no such chat"})
                self.said.append(said)
                return Reply(200, {"id": f"said-{len(self.said)}"})
            return Reply(200, {"url": self.webhook})


@pytest.fixture
def echo_api():
    with FakeEcho() as fake:
        yield fake


def take_call(uow, messenger, call: InboundCall) -> None:
    """What the messengers' door does with a call: verified, then each item taken and committed."""
    for channel, item in inbound_calls.verified_items(uow, messenger, call):
        inbound_calls.take(uow, messenger, channel, item)
        uow.commit()


def sent_by_echo(body: dict, key: str, token: str) -> InboundCall:
    raw = encode(body)
    return InboundCall.of(raw, {"X-Echo-Channel": key, "X-Echo-Signature": hmac_sha256_hex(token, raw)})


def test_a_fourth_messenger_goes_through_the_same_callers(ctx, echo_api, uow):
    echo = Echo()
    messengers = registry(*MESSENGERS.values(), echo)
    config = channel_configs.MessengerConfig(messengers=messengers, public_url="http://127.0.0.1:5000",
                                             allow_private=True, api_urls={"echo": echo_api.url})
    tenant, _key = create_tenant(uow, f"t-{uuid.uuid4().hex[:10]}")
    uow.commit()
    token = "echo-" + secrets.token_hex(8)

    # Connected before it is stored, shown as a messenger channel (never its token).
    shown = channel_configs.create_messenger(uow, tenant.id, type_="echo", name=f"echo-{uuid.uuid4().hex[:6]}",
                                             settings={"token": token}, config=config)
    assert re.fullmatch(r"http://127\.0\.0\.1:5000/webhooks/echo\?channel=[0-9a-f]{16}", shown["webhook_url"])
    assert (echo_api.webhook, shown["bot_id"], shown["bot_name"]) == (shown["webhook_url"], "echo-bot-1", "Echo Bot")
    assert shown["settings"] == {} and token not in json.dumps(shown)
    channel = uow.session.get(Channel, shown["config_id"])
    config_id, key = channel.id, channel.inbound_key

    # Verified with the channel's own secret, or refused with nothing stored.
    forged = sent_by_echo({"id": "m0", "chat": "c1", "text": "hi"}, key, "not-the-token")
    with pytest.raises(UnauthorizedError):
        take_call(uow, echo, forged)
    with pytest.raises(UnauthorizedError):
        take_call(uow, echo, sent_by_echo({"id": "m0", "chat": "c1", "text": "hi"}, "0" * 16, token))

    # Parsed and taken: an event marks the chat unreachable once (a retry is recognised) ...
    for _ in range(2):
        take_call(uow, echo, sent_by_echo({"id": "e1", "blocked": "gone"}, key, token))
    assert reachability.reason_for(uow, config_id, "gone") == "the user left Echo"
    assert uow.session.execute(select(InboundReceipt.external_id).where(
        InboundReceipt.channel_id == config_id)).scalars().all() == ["e1"]
    # ... and a message goes to conversations.accept, which finds no process bound to the channel.
    take_call(uow, echo, sent_by_echo({"id": "m1", "chat": "c1", "text": "hi"}, key, token))
    uow.session.expire_all()
    assert uow.session.get(Channel, config_id).last_error.startswith(
        f"No process is bound to channel {config_id}: deploy one whose start event has trigger = echo")

    # Replies become Echo's calls, sent with the current token and judged by Echo's classify.
    reached = messenger_deliveries.queue_reply(uow, tenant.id, config_id, echo, "c1", "Hello").id
    blocked = messenger_deliveries.queue_reply(uow, tenant.id, config_id, echo, "gone", "Hello?").id
    uow.commit()
    with OutboundHttp(allow_private=True) as http:
        runner = DeliveryRunner(http, channel_calls=messenger_deliveries.MessengerCalls(
            messengers, {"echo": echo_api.url}))
        for job in claim(uow, WORKER, 30, limit=10):
            run_job(current_app.extensions["baton.units"], runner, job, WORKER)
    rows = {row.id: row for row in uow.session.execute(select(Delivery).where(Delivery.channel_id == config_id)
                                                      .execution_options(populate_existing=True)).scalars()}
    assert (rows[reached].url, rows[reached].status, rows[reached].external_id) == ("echo:say", "sent", "said-1")
    assert (rows[blocked].status, rows[blocked].last_error) == (
        "dead", "The customer cannot be reached: the user left Echo.")
    assert echo_api.said == [{"to": "c1", "text": "Hello"}]
    assert echo_api.requests_to("/say")[0].header("Authorization") == token

    # Deleted: its webhook, still its own, is unregistered.
    deleted = channel_configs.delete_messenger(uow, tenant.id, config_id, config)
    uow.commit()  # as the JSON-RPC endpoint does, then the steps after it (the webhook's removal)
    assert run_steps(current_app.extensions["baton.units"], "test", SYSTEM, deleted) == {
        "config_id": config_id, "deleted": True}
    assert echo_api.webhook is None
