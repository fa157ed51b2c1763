"""A key may grant only the permissions it holds: an ``admin``-only key cannot make a ``*`` key
(nor any key stronger than itself), over real HTTP, on SQLite and PostgreSQL."""
from __future__ import annotations

import pytest

from tests.harness import RpcError


@pytest.mark.parametrize("wanted", [["*"], ["process.*"], ["process.start"], ["admin", "task.list"]])
def test_an_admin_only_key_cannot_grant_what_it_does_not_hold(server, api, wanted):
    admin_only = server.api(api.call("apikey.create", name="admins", permissions=["admin"])["api_key"])
    before = api.call("apikey.list", per_page=100)["total"]
    with pytest.raises(RpcError) as caught:
        admin_only.call("apikey.create", name="escalate", permissions=wanted)
    assert caught.value.reason == "forbidden"
    assert "may grant only permissions it holds" in caught.value.message
    assert caught.value.data["permission"] in wanted and caught.value.data["permission"] != "admin"
    assert api.call("apikey.list", per_page=100)["total"] == before  # nothing was created


def test_a_key_grants_what_it_holds_and_narrower(server, api):
    admin_and_process = server.api(api.call("apikey.create", name="ops",
                                            permissions=["admin", "process.*"])["api_key"])
    made = admin_and_process.call("apikey.create", name="narrower", permissions=["process.start", "admin"])
    assert made["permissions"] == ["process.start", "admin"]
    same = admin_and_process.call("apikey.create", name="same", permissions=["process.*"])
    assert same["permissions"] == ["process.*"]
    with pytest.raises(RpcError) as caught:
        admin_and_process.call("apikey.create", name="wider", permissions=["task.*"])
    assert caught.value.data["permission"] == "task.*"
    # The tenant's ``*`` key grants anything.
    assert api.call("apikey.create", name="star", permissions=["*"])["permissions"] == ["*"]
