"""Files customers send, fetched through Baton (GET /v1/media/{binding_id}/{attachment_id}) against
each fake: Telegram's getFile and file download, WhatsApp's media id and bearer download, Viber's media
URL; an id of another tenant or conversation is not found, a key without conversation.messages is
forbidden, and a file over BATON_MEDIA_MAX_BYTES is refused before a byte is passed on."""
from __future__ import annotations

import os

import pytest
import requests

from tests.conftest import make_database_url
from tests.harness import BatonServer, drop_postgres_database
from tests.integration.messengers.helpers import eventually, messages_of, new_chat_id
from tests.integration.messengers.test_telegram_chats import Bot
from tests.integration.messengers.test_viber import Account, new_user
from tests.integration.messengers.test_whatsapp import Number, new_wa_id

PHOTO = os.urandom(150_000)          # more than one chunk of every read on the way


def media(api, binding_id: int, attachment_id: str, key: str | None = "own") -> requests.Response:
    headers = {} if key is None else {"X-API-Key": api.key if key == "own" else key}
    return requests.get(f"{api.base_url}/v1/media/{binding_id}/{attachment_id}", headers=headers, timeout=30)


def received_attachments(api, binding_id: int, count: int = 1) -> list[dict]:
    found = eventually(lambda: [m for m in messages_of(api, binding_id) if m["direction"] == "in"],
                       lambda messages: len(messages) >= count)
    return [attachment for message in found for attachment in message.get("attachments", [])]


def telegram_photo(fake, bot: Bot, chat: int, content: bytes, **photo_fields) -> dict:
    file_id = fake.add_file(content, f"photos/file_{chat}.jpg")
    sizes = [{"file_id": file_id, "file_unique_id": "u", "width": 800, "height": 600, "file_size": len(content),
              **photo_fields}]
    bot.send(fake.update(message=fake.message(chat, photo=sizes, caption="the lid")))
    binding_id = bot.conversation(chat)["binding_id"]
    [attachment] = received_attachments(bot.api, binding_id)
    return {"binding_id": binding_id, **attachment}


def test_a_telegram_photo_is_fetched_through_getfile_without_the_token(mapi, fakes):
    bot = Bot(mapi, fakes.telegram, "chat_collect.bpmn")
    chat = new_chat_id()
    photo = telegram_photo(fakes.telegram, bot, chat, PHOTO)
    variables = mapi.call("process.status", instance_id=bot.conversation(chat)["instance_id"])["variables"]
    assert variables["attachments"][0]["attachment_id"] == photo["attachment_id"]
    answer = media(mapi, photo["binding_id"], photo["attachment_id"])
    assert answer.status_code == 200, answer.text
    assert answer.content == PHOTO
    assert answer.headers["Content-Length"] == str(len(PHOTO))
    assert answer.headers["Content-Disposition"] == f"attachment; filename*=UTF-8''file_{chat}.jpg"
    [get_file] = [r for r in bot.calls("getFile")]
    assert get_file.json() == {"file_id": photo["file_id"]}
    assert bot.token not in str(dict(answer.headers))


def test_another_tenants_or_conversations_attachment_is_not_found_and_a_key_needs_the_permission(
        mapi, other_mapi, fakes):
    bot = Bot(mapi, fakes.telegram, "chat_collect.bpmn")
    first, second = new_chat_id(), new_chat_id()
    photo = telegram_photo(fakes.telegram, bot, first, b"first")
    other_chat = telegram_photo(fakes.telegram, bot, second, b"second")
    downloads_before = len([r for r in fakes.telegram.requests if r.path.startswith("/file/")])
    for binding_id, attachment_id, api in ((other_chat["binding_id"], photo["attachment_id"], mapi),
                                           (photo["binding_id"], photo["attachment_id"], other_mapi),
                                           (photo["binding_id"], "0" * 32, mapi),
                                           (photo["binding_id"], "../../etc/passwd", mapi),
                                           (10**20, photo["attachment_id"], mapi)):
        answer = media(api, binding_id, attachment_id)
        assert answer.status_code == 404, (binding_id, attachment_id, answer.text)
        assert answer.json()["error"]["code"] == "not_found"
    assert media(mapi, photo["binding_id"], photo["attachment_id"], key=None).status_code == 401
    reader = mapi.call("apikey.create", name="no-messages", permissions=["process.start"])["api_key"]
    forbidden = media(mapi, photo["binding_id"], photo["attachment_id"], key=reader)
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden"
    assert len([r for r in fakes.telegram.requests if r.path.startswith("/file/")]) == downloads_before
    allowed = mapi.call("apikey.create", name="messages", permissions=["conversation.messages"])["api_key"]
    assert media(mapi, other_chat["binding_id"], other_chat["attachment_id"], key=allowed).content == b"second"


def test_a_whatsapp_image_is_fetched_by_media_id_with_the_bearer_token(mapi, fakes):
    fake = fakes.whatsapp
    number = Number(mapi, fake, "chat_collect.bpmn")
    wa_id = new_wa_id()
    media_id = fake.add_media(number.number, PHOTO, "image/png")
    number.notify(messages=[fake.message(wa_id, "image", image={"id": media_id, "mime_type": "image/png",
                                                                  "sha256": "ab" * 32, "caption": "receipt"})])
    binding_id = number.conversation(wa_id)["binding_id"]
    [image] = received_attachments(mapi, binding_id)
    answer = media(mapi, binding_id, image["attachment_id"])
    assert answer.status_code == 200, answer.text
    assert (answer.content, answer.headers["Content-Type"]) == (PHOTO, "image/png")
    [download] = [r for r in fake.requests if r.path == f"/whatsapp-media/{media_id}"]
    assert download.header("Authorization") == f"Bearer {number.access_token}"


def test_a_viber_picture_is_fetched_from_its_media_url(mapi, fakes):
    fake = fakes.viber
    account = Account(mapi, fake, "chat_collect.bpmn")
    user = new_user()
    url = fake.add_media(PHOTO, "lid.jpg")
    account.send(fake.message_event(user, type="picture", text="", media=url, thumbnail=url, size=len(PHOTO),
                                    file_name="lid.jpg"))
    binding_id = account.conversation(user)["binding_id"]
    [picture] = received_attachments(mapi, binding_id)
    answer = media(mapi, binding_id, picture["attachment_id"])
    assert answer.status_code == 200 and answer.content == PHOTO


def test_a_telegram_file_larger_than_the_limit_is_refused_before_any_call(mapi, fakes):
    bot = Bot(mapi, fakes.telegram, "chat_collect.bpmn")
    chat = new_chat_id()
    photo = telegram_photo(fakes.telegram, bot, chat, b"tiny", file_size=30 * 1024 * 1024)
    calls_before = len(bot.calls("getFile"))
    answer = media(mapi, photo["binding_id"], photo["attachment_id"])
    assert answer.status_code == 502, answer.text
    error = answer.json()["error"]
    assert error["code"] == "outbound_failed" and "BATON_MEDIA_MAX_BYTES" in error["message"]
    assert len(bot.calls("getFile")) == calls_before


@pytest.fixture
def small_media_server(backend, tmp_path_factory, fakes):
    url = make_database_url(backend, tmp_path_factory)
    server = BatonServer(url, tmp_path_factory.mktemp("small-media"), BATON_MEDIA_MAX_BYTES="100000",
                         **fakes.environment()).start()
    yield server
    server.stop()
    if backend == "postgresql":
        drop_postgres_database(url)


def test_a_download_that_says_it_is_over_the_setting_is_refused_with_a_clear_error(small_media_server, fakes):
    api = small_media_server.api(small_media_server.create_tenant("small-media"))
    fake = fakes.whatsapp
    number = Number(api, fake, "chat_collect.bpmn")
    wa_id = new_wa_id()
    media_id = fake.add_media(number.number, PHOTO, "image/jpeg")           # 150,000 bytes: over 100,000
    number.notify(messages=[fake.message(wa_id, "image", image={"id": media_id, "mime_type": "image/jpeg"})])
    binding_id = number.conversation(wa_id)["binding_id"]
    [image] = received_attachments(api, binding_id)
    answer = media(api, binding_id, image["attachment_id"])
    assert answer.status_code == 502
    assert "larger than this server passes on (100000 bytes" in answer.json()["error"]["message"]
