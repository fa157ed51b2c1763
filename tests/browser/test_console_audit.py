"""The console's Audit log page (issue 29) in Chromium: administration calls listed newest first
with who made them and what they touched, filtered by method, never a secret; hidden from a key
without ``admin``."""
from __future__ import annotations

import uuid


def test_the_audit_log_lists_admin_calls_and_filters_them_by_method(console, api, tenant_key, shots):
    secret = "chat-secret-" + uuid.uuid4().hex
    channel = api.call("channel.create", type="webchat", name=f"audited-{uuid.uuid4().hex[:6]}",
                       webhook_url="http://127.0.0.1:9/chat", webhook_secret=secret)
    api.call("channel.update", config_id=channel["config_id"], webhook_secret=secret + "-2")
    key = api.call("apikey.create", name=f"audit-{uuid.uuid4().hex[:6]}", permissions=["task.list"])
    console.sign_in(tenant_key)
    page = console.page
    assert "Audit log" in page.locator("#nav").inner_text()
    console.go("#/audit")
    page.get_by_role("heading", name="Audit log").wait_for()
    rows = page.locator("table tbody tr")
    rows.first.wait_for()
    texts = rows.all_inner_texts()
    assert "apikey.create" in texts[0] and f"api_key {key['key_id']}" in texts[0]
    assert "channel.update" in texts[1] and f"channel {channel['config_id']}" in texts[1]
    assert secret not in page.content() and key["api_key"] not in page.content()
    shots(page, "audit-log", best=True)
    page.get_by_label("Method").fill("channel.update")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_function("() => location.hash.includes('method=channel.update')")
    page.locator("table tbody tr").first.wait_for()
    filtered = page.locator("table tbody tr").all_inner_texts()
    assert filtered and all("channel.update" in row for row in filtered)
    console.assert_clean()


def test_a_key_without_admin_has_no_audit_log(console, api):
    operator = api.call("apikey.create", name="op", permissions=["process.*"])["api_key"]
    console.sign_in(operator)
    page = console.page
    assert "Audit log" not in page.locator("#nav").inner_text()
    console.go("#/audit")
    page.get_by_role("heading", name="Audit log").wait_for()
    page.get_by_role("alert").filter(has_text="needs the permission 'admin'").wait_for()
    console.assert_clean()
