"""Console with 10,000 instances behind it: each page opens in under a second (paging, counts from
indexes), bulk cancel acts on a selection. Its own server runs no workers, so the instances stay
as started and the figures measure the console and its queries alone."""
from __future__ import annotations

import re
import time

import pytest

from tests.browser.conftest import bpmn_file
from tests.harness import BatonServer

INSTANCES = 10_000


@pytest.fixture(scope="module")
def crowded(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("crowded")
    server = BatonServer(f"sqlite:///{workdir / 'baton.db'}", workdir, BATON_WORKERS="0").start()
    key = server.create_tenant("crowded")
    api = server.api(key)
    definition_id = api.deploy(bpmn_file("console_order.bpmn"), code="crowded")["definition_id"]
    for _ in range(INSTANCES // 100):
        answer = api.post([{"jsonrpc": "2.0", "id": n, "method": "process.start",
                            "params": {"definition_id": definition_id, "variables": {"n": n}}} for n in range(100)])
        assert answer.status_code == 200 and all("result" in item for item in answer.json())
    yield server, key, definition_id
    server.stop()


def timed_open(console, hash_: str, ready) -> float:
    started = time.monotonic()
    console.go(hash_)
    ready()
    return time.monotonic() - started


def test_ten_thousand_instances_open_in_under_a_second(chromium, crowded, shots):
    from tests.browser.conftest import DESKTOP, Console

    server, key, definition_id = crowded
    context = chromium.new_context(viewport=DESKTOP)
    console = Console(context.new_page(), server.base_url)
    page = console.page
    console.sign_in(key)
    rows = page.locator("tbody tr")
    assert server.api(key).call("process.list", per_page=1)["total"] == INSTANCES

    listing = timed_open(console, "#/instances", lambda: page.get_by_text(f"of {INSTANCES}").wait_for())
    assert rows.count() == 20 and listing < 1.0, listing
    shots(page, "instances-10000")  # docs show the list of a run with waits (test_console_runs)
    first_page = rows.locator("td:nth-child(2)").all_inner_texts()
    paging = timed_open(console, "#/instances?page=2", lambda: page.get_by_text("page 2 of 500").wait_for())
    assert rows.locator("td:nth-child(2)").all_inner_texts() != first_page and paging < 1.0, paging
    definition = timed_open(console, f"#/definitions/{definition_id}",
                            lambda: page.locator(".count-badge.passed, table").first.wait_for())
    assert definition < 1.0, definition
    dashboard = timed_open(console, "#/", lambda: page.get_by_role("link", name=re.compile("crowded v1")).wait_for())
    assert dashboard < 1.0, dashboard
    print(f"\n10,000 instances: list {listing:.3f} s, page 2 {paging:.3f} s, definition {definition:.3f} s, "
          f"dashboard {dashboard:.3f} s")
    console.assert_clean()
    context.close()


def test_bulk_cancel_acts_on_the_selection(chromium, crowded):
    from tests.browser.conftest import DESKTOP, Console

    server, key, _ = crowded
    context = chromium.new_context(viewport=DESKTOP)
    console = Console(context.new_page(), server.base_url)
    page = console.page
    console.sign_in(key).go("#/instances?status=running&per_page=20")
    page.get_by_label("Select every instance on this page").check()
    page.get_by_text("20 instances selected.").wait_for()
    page.get_by_role("button", name="Cancel selected").click()
    page.get_by_role("button", name="Cancel 20 instances").click()
    page.get_by_text("Cancel: 20 done.").wait_for()
    api = server.api(key)
    assert api.call("process.list", status="cancelled", per_page=1)["total"] == 20
    assert api.call("process.list", status="running", per_page=1)["total"] == INSTANCES - 20
    console.assert_clean()
    context.close()
