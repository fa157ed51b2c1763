"""Console, channels: a web-chat channel created, shown with its connection and edited through the
form; each messenger type's form is built from its settings (secrets as password fields, no webhook
URL to give) and sends exactly those settings, the server's answer shown in the dialog."""
from __future__ import annotations

import json
import uuid

import pytest

from tests.harness import RpcError

MESSENGER_FIELDS = {
    "Telegram": {"Bot token": "password"},
    "Viber": {"Auth token": "password", "Sender name": "text"},
    "WhatsApp": {"Phone number ID": "text", "Access token": "password", "App secret": "password",
                 "Verify token": "password"},
}


def test_a_web_chat_channel_is_created_listed_with_its_connection_and_disabled(console, tenant_key, api, receiver, shots):
    name = f"site <b>{uuid.uuid4().hex[:6]}</b>"
    console.sign_in(tenant_key).go("#/channels")
    page = console.page
    page.get_by_role("button", name="New channel…").click()
    dialog = page.locator("dialog")
    assert dialog.get_by_label("Type").input_value() == "webchat"
    dialog.get_by_role("textbox", name="Name", exact=True).fill(name)
    dialog.get_by_label("Webhook URL").fill(receiver.url)
    dialog.get_by_label("Webhook secret (optional)").fill("s" * 20)
    dialog.get_by_role("button", name="Create channel").click()
    dialog.wait_for(state="detached")

    row = page.locator("tbody tr", has_text=name)
    row.wait_for()
    text = row.inner_text()
    assert "Web chat" in text and f"answers to {receiver.url}" in text and "signed (X-Baton-Signature)" in text
    assert "enabled" in text
    [stored] = [c for c in api.call("channel.list", per_page=100)["items"] if c["name"] == name]
    assert stored["type"] == "webchat" and stored["webhook_url"] == receiver.url and stored["has_secret"]
    shots(page, "channels", best=True)

    row.get_by_role("button", name=f"Edit channel {name}").click()
    dialog.get_by_label("Enabled").uncheck()
    dialog.get_by_label("Remove the secret (stop signing)").check()
    dialog.get_by_role("button", name="Save").click()
    dialog.wait_for(state="detached")
    page.locator("tbody tr", has_text=name).get_by_text("disabled").wait_for()
    assert "not signed" in page.locator("tbody tr", has_text=name).inner_text()
    changed = api.call("channel.list", per_page=100)["items"]
    assert [(c["enabled"], c["has_secret"]) for c in changed if c["name"] == name] == [(False, False)]
    console.assert_clean()


@pytest.mark.parametrize("label", list(MESSENGER_FIELDS))
def test_a_messenger_form_asks_for_its_settings_and_sends_exactly_them(console, tenant_key, api, shots, label):
    console.sign_in(tenant_key).go("#/channels")
    page = console.page
    page.get_by_role("button", name="New channel…").click()
    dialog = page.locator("dialog")
    dialog.get_by_label("Type").select_option(label=label)

    assert dialog.get_by_label("Webhook URL").is_hidden()  # Baton registers its own with the messenger
    for field, kind in MESSENGER_FIELDS[label].items():
        assert dialog.get_by_label(field).get_attribute("type") == kind
    if label == "WhatsApp":
        shots(page, "channel-new-whatsapp", best=True)
    name = f"{label.lower()}-{uuid.uuid4().hex[:6]}"
    dialog.get_by_role("textbox", name="Name", exact=True).fill(name)
    values = {field: f"{index}23456789" for index, field in enumerate(MESSENGER_FIELDS[label], start=1)}
    for field, value in values.items():
        dialog.get_by_label(field).fill(value)

    with page.expect_request(lambda r: r.url.endswith("/v1/rpc") and "channel.create" in (r.post_data or "")) as sent:
        dialog.get_by_role("button", name="Create channel").click()
    params = json.loads(sent.value.post_data)["params"]
    type_ = label.lower()
    keys = {"Telegram": ["bot_token"], "Viber": ["auth_token", "sender_name"],
            "WhatsApp": ["phone_number_id", "access_token", "app_secret", "verify_token"]}[label]
    assert params == {"type": type_, "name": name, "settings": dict(zip(keys, values.values()))}

    # What the server answers the same call is what the dialog shows (the fake messenger refuses
    # these made-up credentials: invalid_params quoting it; nothing is stored).
    with pytest.raises(RpcError) as refused:
        api.call("channel.create", **params)
    assert refused.value.reason == "invalid_params", refused.value
    problem = dialog.locator(".dialog-problem")
    problem.filter(has_text=refused.value.message).wait_for()
    assert name not in [c["name"] for c in api.call("channel.list", per_page=100)["items"]]
    dialog.get_by_role("button", name="Cancel").click()
    console.assert_clean()
