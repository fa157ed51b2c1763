"""The browser console: a static single-page app under ``/console/`` and the headers that confine it.

Everything the console shows and does goes through ``/v1/rpc`` with the API key the user typed;
this blueprint only serves files. The Content-Security-Policy is why no page may hold inline
script or inline style, and why the app inserts data as text (docs/console.md, "Security").
"""
from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response, redirect, send_from_directory

STATIC = Path(__file__).resolve().parent / "static"

# Scripts only from this origin: no inline script, no eval (bpmn-js's prebuilt viewer needs
# neither). Styles only from this origin too: bpmn-js sets its few inline styles through the
# CSSOM (element.style), which CSP does not govern, and injects no <style> element, so
# 'unsafe-inline' is not needed. img-src allows data: for one icon in bpmn-js.css.
CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:",
    "font-src 'self'", "connect-src 'self'", "base-uri 'none'", "form-action 'none'",
    "frame-ancestors 'none'"))
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Opener-Policy": "same-origin",
}

def console_blueprint() -> Blueprint:
    """``/console/``: the app's files under the headers above. It needs nothing from the settings:
    the page reads everything through ``/v1/rpc`` on the same origin."""
    bp = Blueprint("console", __name__, url_prefix="/console")

    @bp.after_request
    def _confine(response: Response) -> Response:
        response.headers.update(HEADERS)
        # The page and its modules change with each release; without this a browser may mix versions.
        response.headers["Cache-Control"] = "no-cache"
        return response

    @bp.get("")
    def _to_slash() -> Response:
        return redirect("/console/", code=308)

    @bp.get("/")
    def index() -> Response:
        return send_from_directory(STATIC, "index.html")

    @bp.get("/<path:name>")
    def asset(name: str) -> Response:
        # send_from_directory refuses paths that leave STATIC (404), so ../ cannot reach the app's files.
        return send_from_directory(STATIC, name)

    return bp
