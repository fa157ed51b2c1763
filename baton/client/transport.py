"""One JSON-RPC call over HTTP to a Baton server, and the one error class every failed call raises."""
from __future__ import annotations

import itertools
import threading
from typing import Any

import requests


class RpcError(Exception):
    """A call that did not succeed: Baton's error (``code``, ``reason`` = its ``data.reason``,
    ``message``, ``data``), or the client's own when no answer came (``reason`` ``unreachable``:
    no connection or no answer in time; ``bad_answer``: the answer was not Baton's JSON-RPC), with
    ``code`` None then."""

    def __init__(self, message: str, *, code: int | None = None, reason: str = "internal",
                 data: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.data = dict(data or {})

    def __str__(self) -> str:
        return self.message


class Omitted:
    """The default of an optional param whose ``null`` means something (a secret to remove): left out."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT: Any = Omitted()


class Transport:
    """Calls ``url``/v1/rpc with ``api_key``; one HTTP session per thread (keep-alive)."""

    def __init__(self, url: str, api_key: str, *, timeout_s: float = 30.0):
        self.url = url.rstrip("/")
        self.endpoint = self.url + "/v1/rpc"
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._ids = itertools.count(1)

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers.update({"X-API-Key": self.api_key, "Content-Type": "application/json"})
        return session

    def call(self, method: str, params: dict[str, Any], *, timeout_s: float | None = None) -> Any:
        """The method's result; RpcError otherwise. ``timeout_s``: longer than the default for a
        call the server may hold (a long poll)."""
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        try:
            response = self._session().post(self.endpoint, json=body, timeout=timeout_s or self.timeout_s)
        except requests.RequestException as exc:
            raise RpcError(f"Cannot reach Baton at {self.url}: {_cause(exc)}.", reason="unreachable") from exc
        try:
            answer = response.json()
        except ValueError:
            raise RpcError(f"Baton at {self.url} answered HTTP {response.status_code} with no JSON-RPC answer.",
                           reason="bad_answer") from None
        if not isinstance(answer, dict) or ("result" not in answer and "error" not in answer):
            raise RpcError(f"Baton at {self.url} answered HTTP {response.status_code} with no JSON-RPC answer.",
                           reason="bad_answer")
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            data = error.get("data") if isinstance(error.get("data"), dict) else {}
            raise RpcError(str(error.get("message") or "Baton refused the call."), code=error.get("code"),
                           reason=str(data.get("reason") or "internal"), data=data)
        return answer["result"]

    def close(self) -> None:
        session = getattr(self._local, "session", None)
        if session is not None:
            session.close()
            self._local.session = None


def _cause(exc: requests.RequestException) -> str:
    if isinstance(exc, requests.Timeout):
        return "no answer in time"
    if isinstance(exc, requests.ConnectionError):
        return "the connection failed (is the server running, is the URL right?)"
    return type(exc).__name__


def without_omitted(params: dict[str, Any], nullable: tuple[str, ...] = ()) -> dict[str, Any]:
    """The params to send: an optional param left at None is left out (null counts as absent),
    except a nullable one, which is left out only when ``OMIT``."""
    return {name: value for name, value in params.items()
            if value is not OMIT and (value is not None or name in nullable)}
