"""The console's blueprint: every answer under /console/ carries the confining headers, and no path
leaves the static folder (encoded traversal included)."""
from __future__ import annotations

import pytest
from flask import Flask

from console import HEADERS, console_blueprint


@pytest.fixture
def client():
    app = Flask(__name__)
    app.register_blueprint(console_blueprint())
    return app.test_client()


@pytest.mark.parametrize("path", ["/console/", "/console/js/main.js", "/console/vendor/bpmn-js.css"])
def test_pages_and_assets_carry_the_headers(client, path):
    with client.get(path) as answer:  # (closing it closes the file it streams)
        assert answer.status_code == 200
        for name, value in HEADERS.items():
            assert answer.headers[name] == value
        assert "'unsafe-inline'" not in answer.headers["Content-Security-Policy"]


def test_the_bare_path_redirects_to_the_app(client):
    answer = client.get("/console")
    assert answer.status_code == 308 and answer.headers["Location"].endswith("/console/")


@pytest.mark.parametrize("path", ["/console/..%2f__init__.py", "/console/%2e%2e/__init__.py",
                                  "/console/js/..%2f..%2f__init__.py", "/console/nothing.js"])
def test_nothing_outside_the_static_folder_is_served(client, path):
    answer = client.get(path)
    assert answer.status_code == 404
    assert answer.headers["X-Frame-Options"] == "DENY"  # refusals are confined too
