"""Creating messenger channels in production settings (private addresses not allowed): the messengers
only call HTTPS URLs, so a BATON_PUBLIC_URL that is unset or not https:// is refused before anything
is sent or stored, with the reason."""
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from engine.auth import create_tenant
from engine.chat import channel_configs
from engine.chat.messengers.registry import MESSENGERS
from engine.errors import InvalidParamsError
from engine.store.db import db
from engine.store.models import Channel
from tests.fakes.telegram import FakeTelegram

SETTINGS = {"telegram": {"bot_token": "123456:" + "a" * 35},
            "viber": {"auth_token": "4453b6ac1-s345df", "sender_name": "Acme"},
            "whatsapp": {"phone_number_id": "1065", "access_token": "EAAG1", "app_secret": "s", "verify_token": "v"}}


@pytest.fixture
def tenant_id(app, uow):
    with app.app_context():
        tenant, _key = create_tenant(uow, f"t-{uuid.uuid4().hex[:10]}")
        yield tenant.id
        uow.rollback()
        db.session.remove()


@pytest.mark.parametrize("type_", ["telegram", "viber", "whatsapp"])
@pytest.mark.parametrize("public_url, shown", [("http://baton.example.com", "'http://baton.example.com'"),
                                               (None, "unset")])
def test_a_public_url_that_is_not_https_is_refused_before_the_messenger_is_called(tenant_id, type_, public_url,
                                                                                  shown, uow):
    with FakeTelegram() as fake:          # stands for any messenger: it must receive nothing
        config = channel_configs.MessengerConfig(messengers=MESSENGERS, public_url=public_url, allow_private=False,
                                                 api_urls=dict.fromkeys(SETTINGS, fake.api_url))
        name = f"prod-{uuid.uuid4().hex[:6]}"
        with pytest.raises(InvalidParamsError) as refused:
            channel_configs.create_messenger(uow, tenant_id, type_=type_, name=name, settings=SETTINGS[type_],
                                             config=config)
        assert fake.requests == []
    assert "only calls HTTPS webhook URLs: set BATON_PUBLIC_URL" in refused.value.message
    assert f"(it is {shown})" in refused.value.message
    assert refused.value.data["config"] == "BATON_PUBLIC_URL"
    assert uow.session.execute(select(Channel).where(Channel.name == name)).first() is None
