"""Files in replies (send_message's attachment_url / attachment_type), against each fake: Telegram's
sendPhoto / sendDocument, Viber's picture / file messages, WhatsApp's image / document by link; the
text as the caption where it fits, else after the file; a URL that is not http(s) or that the SSRF
guard refuses fails the step and sends nothing; what a messenger cannot send is refused at deploy."""
from __future__ import annotations

import pytest
import requests

from tests.harness import RpcError
from tests.integration.messengers.helpers import deploy_on, eventually, messages_of, new_chat_id, new_name
from tests.integration.messengers.test_telegram_chats import Bot
from tests.integration.messengers.test_viber import Account, new_user
from tests.integration.messengers.test_whatsapp import Number, new_wa_id

PICTURE = "https://files.example.com/parcels/lid%20photo.jpg"
INVOICE = "https://files.example.com/invoices/{{ message_text }}.pdf"


def attachment(text: str, url: str, kind: str, more: str = "") -> dict:
    return {"text": text, "url": url, "type": kind, "more": more}


def size_property(size: str) -> str:
    return f'<camunda:property name="attachment_size" value="{size}" />'


def test_telegram_sends_a_photo_with_its_caption_and_the_buttons_on_it(mapi, fakes):
    bot = Bot(mapi, fakes.telegram, "chat_attachment.bpmn", **attachment("Your parcel, {{ external_username }}",
                                                                       PICTURE, "image"))
    chat = new_chat_id()
    bot.say(chat, "show me")
    [sent] = eventually(lambda: bot.sent(chat), lambda found: len(found) >= 1)
    assert (sent["photo"], sent["caption"]) == (PICTURE, "Your parcel, Ann")
    assert bot.calls("sendMessage") == []
    binding_id = bot.conversation(chat)["binding_id"]
    out = eventually(lambda: [m for m in messages_of(mapi, binding_id) if m["direction"] == "out"],
                     lambda found: found and found[0]["delivery"] == "sent")
    assert out[0]["attachment"] == {"type": "image", "url": PICTURE}


def test_telegram_sends_a_document_first_and_a_text_too_long_for_a_caption_after_it(mapi, fakes):
    long_text = "word " * 300                                   # 1500 characters: over the 1024 of a caption
    bot = Bot(mapi, fakes.telegram, "chat_attachment.bpmn", **attachment(long_text, INVOICE, "document"))
    chat = new_chat_id()
    bot.say(chat, "inv-42")
    sent = eventually(lambda: bot.sent(chat), lambda found: len(found) >= 2)
    assert sent[0]["document"] == "https://files.example.com/invoices/inv-42.pdf" and "caption" not in sent[0]
    assert sent[1]["text"] == long_text
    assert [r.path.rsplit("/", 1)[1] for r in bot.calls("sendDocument") + bot.calls("sendMessage")] == [
        "sendDocument", "sendMessage"]


def test_viber_sends_a_picture_with_its_description_and_a_file_with_its_size_and_name(mapi, fakes):
    account = Account(mapi, fakes.viber, "chat_attachment.bpmn", **attachment("Here it is", PICTURE, "image"))
    user = new_user()
    account.send(fakes.viber.message_event(user, "photo please"))
    [picture] = eventually(lambda: account.sent(user), lambda found: len(found) >= 1)
    assert (picture["type"], picture["media"], picture["text"]) == ("picture", PICTURE, "Here it is")

    files = Account(mapi, fakes.viber, "chat_attachment.bpmn",
                    **attachment("Your invoice", INVOICE, "document", size_property("48213")))
    files.send(fakes.viber.message_event(user, "inv-7"))
    sent = eventually(lambda: files.sent(user), lambda found: len(found) >= 2)
    assert [(s["type"], s.get("file_name"), s.get("size"), s["text"] if s["type"] == "text" else None)
            for s in sent] == [("file", "inv-7.pdf", 48213, None), ("text", None, None, "Your invoice")]


def test_a_viber_document_without_its_size_is_refused_at_deploy(mapi, fakes):
    with pytest.raises(RpcError) as refused:
        Account(mapi, fakes.viber, "chat_attachment.bpmn", **attachment("Invoice", INVOICE, "document"))
    [error] = refused.value.data["errors"]
    assert error["element_id"] == "send_file" and "attachment_size" in error["message"]


def test_whatsapp_sends_an_image_by_link_with_its_caption_and_a_document_with_its_file_name(mapi, fakes):
    number = Number(mapi, fakes.whatsapp, "chat_attachment.bpmn", **attachment("The photo", PICTURE, "image"))
    wa_id = new_wa_id()
    number.notify(messages=[fakes.whatsapp.text_message(wa_id, "photo")])
    [image] = number.texts(wa_id, 1)
    assert (image["type"], image["image"]) == ("image", {"link": PICTURE, "caption": "The photo"})

    other = Number(mapi, fakes.whatsapp, "chat_attachment.bpmn", **attachment("Invoice", INVOICE, "document"))
    other.notify(messages=[fakes.whatsapp.text_message(wa_id, "inv-9")])
    [document] = other.texts(wa_id, 1)
    assert document["document"] == {"link": "https://files.example.com/invoices/inv-9.pdf",
                                    "filename": "inv-9.pdf", "caption": "Invoice"}


@pytest.mark.parametrize("url, why", [
    ("ftp://files.example.com/{{ message_text }}", "must be an http:// or https:// URL"),
    ("{{ message_text }}", "must be an http:// or https:// URL"),
    ("https://user:secret@files.example.com/a.pdf?{{ message_text }}", "is refused"),
])
def test_an_attachment_url_that_is_not_http_or_is_refused_fails_the_step_and_sends_nothing(mapi, fakes, url, why):
    bot = Bot(mapi, fakes.telegram, fixture=None)
    definition_id = deploy_on(mapi, "chat_attachment.bpmn", bot.channel,
                              **attachment("Your file", url, "document"))["definition_id"]
    chat = new_chat_id()
    bot.say(chat, "file:///etc/passwd")
    [started] = eventually(lambda: mapi.call("process.list", definition_id=definition_id)["items"],
                           lambda found: len(found) == 1)
    status = mapi.wait_for(started["instance_id"])
    assert status["status"] == "failed" and why in status["error"]["message"], status["error"]
    assert status["error"]["element_id"] == "send_file"
    mapi.wait_until_idle()
    assert bot.sent(chat) == []


def test_deploy_refuses_an_attachment_without_a_type_or_with_a_url_that_is_not_http(mapi, fakes):
    bot = Bot(mapi, fakes.telegram, fixture=None)
    for url, kind, expected in (("https://x.example/a.png", "video", "attachment_type must be image or document"),
                                ("ftp://x.example/a.png", "image", "must be an http:// or https:// URL")):
        with pytest.raises(RpcError) as refused:
            deploy_on(mapi, "chat_attachment.bpmn", bot.channel, **attachment("Hi", url, kind))
        assert any(expected in error["message"] for error in refused.value.data["errors"]), refused.value.data


def test_with_private_urls_not_allowed_an_attachment_on_a_private_address_fails_the_step(backend, own_database,
                                                                                         tmp_path):
    """The SSRF guard as production runs it: a file URL on 127.0.0.1 is refused before anything is queued
    (a web-chat channel, whose receiver is never called: the step fails first)."""
    from tests.harness import BatonServer, bpmn

    guarded = BatonServer(own_database, tmp_path, BATON_ALLOW_PRIVATE_URLS="0").start()
    try:
        api = guarded.api(guarded.create_tenant(f"media-ssrf-{tmp_path.name[-8:]}"))
        channel = api.call("channel.create", type="webchat", name="site", webhook_url="https://chat.example.com/hook",
                           webhook_secret="s" * 32)
        xml = bpmn("chat_attachment.bpmn")
        for name, value in attachment("Your file", "http://127.0.0.1:9/{{ message_text }}.pdf", "document").items():
            xml = xml.replace(f"__{name.upper()}__", value)
        definition_id = api.deploy(xml.replace("__CHANNEL__", "site"), code="media-ssrf")["definition_id"]
        answer = requests.post(f"{guarded.base_url}/channels/webchat/{channel['config_id']}/inbound",
                               json={"chat_id": "c1", "text": "secret"}, headers={"X-API-Key": api.key}, timeout=10)
        assert answer.status_code == 202, answer.text
        [started] = eventually(lambda: api.call("process.list", definition_id=definition_id)["items"],
                               lambda found: len(found) == 1)
        status = api.wait_for(started["instance_id"])
        assert status["status"] == "failed" and "is refused" in status["error"]["message"], status["error"]
        assert "127.0.0.1" in status["error"]["message"]
        assert api.call("delivery.list")["items"] == []
    finally:
        guarded.stop()


def test_a_web_chat_answer_carries_the_file_as_an_attachment(mapi, receiver):
    channel = mapi.call("channel.create", type="webchat", name=new_name("site"), webhook_url=receiver.url)
    deploy_on(mapi, "chat_attachment.bpmn", channel, **attachment("Your invoice", INVOICE, "document"))
    answer = requests.post(f"{mapi.base_url}/channels/webchat/{channel['config_id']}/inbound",
                           json={"chat_id": "c-media", "text": "inv-3"}, headers={"X-API-Key": mapi.key}, timeout=10)
    assert answer.status_code == 202, answer.text
    [sent] = receiver.wait_for(1)
    body = sent.json()
    assert (body["text"], body["attachment"]) == ("Your invoice", {
        "type": "document", "url": "https://files.example.com/invoices/inv-3.pdf"})
