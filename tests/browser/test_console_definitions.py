"""Console, definitions side: headers, sign-in, upload (good and refused), the definition page,
non-admin refusals, API keys. A real Chromium against a real server."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import requests

from tests.browser.conftest import BPMN, bpmn_file

BPMN_NS = "{http://www.omg.org/spec/BPMN/20100524/MODEL}"


def element_ids(name: str) -> list[str]:
    """Every flow node and sequence flow of a test file: each must get an SVG shape."""
    process = ET.parse(BPMN / name).getroot().find(f"{BPMN_NS}process")
    return [child.get("id") for child in process if child.get("id")]


def drop_file(page, selector: str, name: str, text: str):
    """A real drop event carrying a File, as a person dragging it from their desktop makes."""
    transfer = page.evaluate_handle("""([name, text]) => {
        const dt = new DataTransfer();
        dt.items.add(new File([text], name, { type: 'application/xml' }));
        return dt; }""", [name, text])
    page.dispatch_event(selector, "dragover", {"dataTransfer": transfer})
    page.dispatch_event(selector, "drop", {"dataTransfer": transfer})


def test_console_is_served_with_strict_security_headers(console_server, console):
    answer = requests.get(console_server.base_url + "/console/", timeout=10)
    csp = answer.headers["Content-Security-Policy"]
    assert answer.status_code == 200 and "<script" in answer.text
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert answer.headers["X-Frame-Options"] == "DENY" and answer.headers["Referrer-Policy"] == "no-referrer"
    assert "<script>" not in answer.text and "style=" not in answer.text  # nothing inline to allow
    viewer = requests.get(console_server.base_url + "/console/vendor/bpmn-navigated-viewer.production.min.js", timeout=10)
    assert viewer.status_code == 200 and "javascript" in viewer.headers["Content-Type"]
    assert viewer.headers["Content-Security-Policy"] == csp
    assert requests.get(console_server.base_url + "/console/../app.py", timeout=10).status_code == 404
    assert requests.get(console_server.base_url + "/console/%2e%2e/app.py", timeout=10).status_code == 404
    # the browser sees the same header on the page it loads
    response = console.page.goto(console_server.base_url + "/console/")
    assert response.headers["content-security-policy"] == csp


def test_sign_in_refuses_a_wrong_key_then_keeps_a_right_one_in_session_storage(console, tenant_key, shots):
    page = console.open().page
    page.get_by_label("API key").fill("bt_000000000000_" + "x" * 32)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_text("This API key was refused").wait_for()
    shots(page, "signin-refused")
    page.get_by_label("API key").fill(tenant_key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector("#nav a")
    assert page.evaluate("sessionStorage.getItem('baton.apiKey')") == tenant_key
    assert page.context.cookies() == []
    assert page.locator("#who").inner_text().count("*") == 1  # what the key allows
    page.reload()
    page.wait_for_selector("#nav a")  # still signed in within the tab
    page.get_by_role("button", name="Sign out").click()
    page.get_by_label("API key").wait_for()
    assert page.evaluate("sessionStorage.getItem('baton.apiKey')") is None
    console.assert_clean()


def test_upload_a_good_file_draws_a_shape_for_every_element(console, tenant_key, api, shots):
    console.sign_in(tenant_key).go("#/definitions")
    page = console.page
    page.get_by_role("heading", name="Definitions").wait_for()
    page.set_input_files("#bpmn-file", str(BPMN / "console_order.bpmn"))
    page.wait_for_url(re.compile(r".*#/definitions/\d+$"))
    for element_id in element_ids("console_order.bpmn"):
        page.locator(f"svg g.djs-element[data-element-id='{element_id}']").first.wait_for(state="attached")
    assert page.locator(".djs-element[data-element-id='review'] text").text_content() == "Review the order"
    assert page.locator(".bjs-powered-by").count() == 1  # bpmn.io's watermark stays
    deployed = api.call("definition.list", code="console_order")["items"]
    assert deployed and page.url.endswith(f"#/definitions/{deployed[0]['definition_id']}")
    page.get_by_text("No instance has reached any element yet.").wait_for()
    assert "null" not in page.locator("main").inner_text()
    shots(page, "definition", best=True)
    console.assert_clean()


def test_a_refused_file_is_drawn_with_the_refused_element_outlined_and_its_message(console, tenant_key, api, shots):
    console.sign_in(tenant_key).go("#/definitions")
    page = console.page
    page.get_by_role("heading", name="Definitions").wait_for()
    drop_file(page, ".dropzone", "console_refused.bpmn", bpmn_file("console_refused.bpmn"))
    refused = page.locator(".djs-element.baton-refused[data-element-id='read_file']")
    refused.wait_for()
    stroke = refused.locator(".djs-visual > :first-child").evaluate("e => getComputedStyle(e).stroke")
    assert stroke == "rgb(218, 30, 40)"
    # Each refused element carries a small badge that covers none of its neighbours; opening it
    # shows the element's messages (all of them are listed under the diagram too).
    badges = page.locator(".refusal-toggle")
    assert badges.count() == 2
    boxes = [badge.bounding_box() for badge in badges.all()]
    for element_id in ("start", "read_file", "end"):
        shape = page.locator(f".djs-element[data-element-id='{element_id}'] .djs-hit").first.bounding_box()
        if shape is None:
            continue
        for badge in boxes:
            inside = (badge["x"] >= shape["x"] + 4 and badge["x"] + badge["width"] <= shape["x"] + shape["width"] - 4
                      and badge["y"] >= shape["y"] + 4 and badge["y"] + badge["height"] <= shape["y"] + shape["height"] - 4)
            assert not inside, f"a refusal badge hides {element_id}"
    first, second = boxes
    apart = (first["y"] + first["height"] <= second["y"] or second["y"] + second["height"] <= first["y"]
             or first["x"] + first["width"] <= second["x"] or second["x"] + second["width"] <= first["x"])
    assert apart, "two neighbours' badges cover each other"
    for badge in badges.all():
        badge.click()
        assert badge.get_attribute("aria-expanded") == "true"
    notes = " ".join(page.locator(".refusal-note").all_inner_texts())
    assert "imports are not allowed" in notes and "Line 1" in notes and "'fax' is unknown" in notes
    assert page.locator(".baton-refused").count() == 2  # the start event too (trigger fax)
    assert "read_file" in page.locator("ol.refusals").inner_text() and "start" in page.locator("ol.refusals").inner_text()
    assert api.call("definition.list", code="console_refused")["total"] == 0  # nothing stored
    shots(page, "definitions-refused", best=True)
    console.assert_clean()


def test_definition_page_shows_badges_that_list_the_instances(console, tenant_key, api, shots):
    definition_id = api.deploy(bpmn_file("console_failing.bpmn"), code="badges")["definition_id"]
    ids = [api.call("process.start", definition_id=definition_id)["instance_id"] for _ in range(2)]
    for instance_id in ids:
        api.wait_for(instance_id)
    console.sign_in(tenant_key).go(f"#/definitions/{definition_id}")
    page = console.page
    badge = page.locator(".count-badge.failed", has_text="2")
    badge.wait_for()
    shots(page, "definition-badges", best=True)
    badge.click()
    page.wait_for_url(re.compile(r".*element_id=divide.*at=failed"))
    # the URL changes before the list replaces the definition page (whose table has rows too)
    page.locator(".alert-info", has_text="failed at").wait_for()
    rows = page.locator("table tbody tr")
    rows.first.wait_for()
    assert rows.locator("td", has_text="failed at divide").count() == 2  # the Where column
    assert rows.count() == 2 and sorted(ids) == sorted(int(t.strip("#")) for t in rows.locator("td:nth-child(2)").all_inner_texts())
    console.assert_clean()


def test_a_key_without_admin_sees_the_admin_views_refused(console, console_server, api, shots):
    operator = api.call("apikey.create", name="operator", permissions=["process.*", "task.*", "conversation.*"])["api_key"]
    console.sign_in(operator)
    page = console.page
    nav = page.locator("#nav").inner_text()
    assert "Tasks" in nav and "Instances" in nav
    for hidden in ("Definitions", "Channels", "API keys", "Deliveries"):
        assert hidden not in nav
    for hash_, title in [("#/channels", "Channels"), ("#/keys", "API keys"), ("#/definitions", "Definitions"),
                         ("#/deliveries", "Deliveries")]:
        console.go(hash_)
        page.get_by_role("heading", name=title).wait_for()
        alert = page.get_by_role("alert").filter(has_text="needs the permission 'admin', which your API key lacks")
        alert.wait_for()
    shots(page, "non-admin-refused", best=True)
    console.go("#/")
    page.get_by_role("heading", name="Dashboard").wait_for()
    console.assert_clean()


def test_a_new_api_key_is_shown_once_with_a_copy_button(console, console_server, tenant_key, shots):
    console.page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    console.sign_in(tenant_key).go("#/keys")
    page = console.page
    page.get_by_role("heading", name="API keys").wait_for()
    page.get_by_role("button", name="New key…").click()
    page.get_by_label("Name").fill("crm-sync")
    page.get_by_label(re.compile("^process")).check()
    page.get_by_role("button", name="Create key").click()
    shown = page.get_by_label("The new API key")
    shown.wait_for()
    key = shown.input_value()
    assert key.startswith("bt_")
    page.get_by_role("button", name="Copy key").click()
    page.get_by_role("button", name="Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == key
    shots(page, "apikey-created", best=True)
    page.get_by_role("button", name="Done").click()
    assert page.get_by_label("The new API key").count() == 0
    page.get_by_role("cell", name="crm-sync").wait_for()
    assert key not in page.content()  # never shown again
    assert console_server.api(key).call("auth.whoami")["permissions"] == ["process.*"]
    console.assert_clean()
