"""Outbound HTTP with an SSRF guard: the one way Baton calls an address that comes from a tenant.

``OutboundHttp.request`` resolves a host once, checks every address with ``engine.outbound.guard``
and connects to exactly those; no redirects, proxies, ``.netrc`` or cookies. Failures are
``OutboundRefusedError`` or ``OutboundError``, naming the host but never the path or query.
The rules in full: docs/internals.md, "Outbound HTTP".
"""
from __future__ import annotations

import datetime
import email.utils
import json as jsonlib
import math
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import requests
import urllib3
from requests.structures import CaseInsensitiveDict
from urllib3.exceptions import NameResolutionError, NewConnectionError

from engine.errors import OutboundError, OutboundRefusedError
from engine.outbound.guard import address_refusal, checked_host, refused
from engine.outbound.pinned_connections import pinned_adapter

_METHOD = re.compile(r"^[A-Z]{1,20}$")

_READ_CHUNK = 65_536


def _refuse_non_public(host: str, addresses: list[str]) -> None:
    """The guard's check of a resolved host: every address must be public."""
    for address in addresses:
        kind = address_refusal(address)
        if kind:
            raise refused(f"{host} resolves to {address}, a {kind} address")


MAX_RETRY_AFTER_S = 86_400.0  # the longest Retry-After honoured


# --- the response ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class OutboundResponse:
    """An answer, whatever its status (3xx, 4xx and 5xx are answers too, never errors)."""

    status: int
    headers: Mapping[str, str] = field(repr=False)     # case-insensitive
    body: bytes = field(repr=False)
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The body parsed as JSON, or OutboundError."""
        try:
            return jsonlib.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            raise OutboundError(f"The response (status {self.status}) is not valid JSON.") from None

    def retry_after_s(self, now: float | None = None) -> float | None:
        """Seconds the server asks us to wait (``Retry-After`` as seconds or HTTP-date), else None.

        A date in the past gives 0.0; a missing or unreadable header gives None; more than a day
        gives a day (a server must not park a call or a delivery for years, nor overflow a float)."""
        value = (self.headers.get("Retry-After") or "").strip()
        if not value:
            return None
        if value.isascii() and value.isdigit():
            return MAX_RETRY_AFTER_S if len(value) > 9 else min(float(value), MAX_RETRY_AFTER_S)
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:                              # "-0000": UTC as well
            when = when.replace(tzinfo=datetime.timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
        return min(max(0.0, seconds), MAX_RETRY_AFTER_S) if math.isfinite(seconds) else None


class OutboundStream:
    """An answer not read yet (``OutboundHttp.stream``): its status and headers, then its body in
    chunks, cut off with OutboundError past ``max_bytes`` or the deadline."""

    def __init__(self, status: int, headers: Mapping[str, str], response: requests.Response, deadline: float,
                 where: str, max_bytes: int):
        self.status, self.headers = status, headers
        self._response, self._deadline, self._where, self.max_bytes = response, deadline, where, max_bytes

    @property
    def declared_size(self) -> int | None:
        length = (self.headers.get("Content-Length") or "").strip()
        return int(length) if length.isascii() and length.isdigit() else None

    def too_large(self) -> OutboundError:
        return OutboundError(f"Outbound call to {self._where} failed: the response is larger than "
                             f"{self.max_bytes} bytes.")

    def read(self) -> bytes:
        """The whole body (an error answer's, say), within the limit."""
        return b"".join(self.chunks())

    def chunks(self):
        size = 0
        try:
            while True:
                if time.monotonic() > self._deadline:
                    raise OutboundError(f"Outbound call to {self._where} failed: timed out while reading "
                                        "the response.")
                chunk = self._response.raw.read1(_READ_CHUNK, decode_content=True)
                if not chunk:
                    return
                size += len(chunk)
                if size > self.max_bytes:
                    raise self.too_large()
                yield chunk
        except OutboundError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise OutboundError(f"Outbound call to {self._where} failed: {_describe(exc)}.") from None

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> OutboundStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the client -----------------------------------------------------------------------------------

class OutboundHttp:
    """A thread-safe HTTP client with the SSRF guard; one per process is enough."""

    def __init__(self, *, allow_private: bool, timeout_s: float = 10.0,
                 max_response_bytes: int = 1_048_576, user_agent: str = "Baton/1.0"):
        self.allow_private = bool(allow_private)
        self.timeout_s = float(timeout_s)
        self.max_response_bytes = int(max_response_bytes)
        self.user_agent = user_agent
        self._adapter = pinned_adapter(None if self.allow_private else _refuse_non_public,
                                       pool_connections=32, pool_maxsize=16, max_retries=0)

    def close(self) -> None:
        """Close pooled connections; the client can still be used afterwards (it reconnects)."""
        self._adapter.close()

    def __enter__(self) -> OutboundHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- checks --

    def check_url(self, url: str) -> None:
        """Refuse (OutboundRefusedError) a URL that can never be called. Does not resolve DNS.

        Always: http/https only, a valid host, no user info, a port from 1 to 65535. Unless private
        addresses are allowed also: no IP literal (any notation) that is not public and no
        ``localhost``/``.local``/``.internal`` style name. Names are checked again, resolved, when
        a request connects."""
        self._checked(url)

    def _checked(self, url: str) -> tuple[str, int]:
        return checked_host(url, allow_private=self.allow_private)

    # -- requests --

    def request(self, method: str, url: str, *, headers: Mapping[str, str] | None = None,
                body: bytes | None = None, timeout_s: float | None = None) -> OutboundResponse:
        """Send one request and read the whole answer (at most ``max_response_bytes``).

        Raises OutboundRefusedError (URL or resolved address not allowed) or OutboundError
        (name resolution, connection, TLS, timeout, response too large); any status is returned."""
        response, started, deadline, where = self._send(method, url, headers, body, timeout_s)
        try:
            content = self._read_body(response, deadline, where)
        finally:
            response.close()
        return OutboundResponse(status=response.status_code, headers=response.headers,
                                body=content, elapsed_s=time.monotonic() - started)

    def stream(self, method: str, url: str, *, headers: Mapping[str, str] | None = None,
               timeout_s: float | None = None, max_bytes: int) -> OutboundStream:
        """Send one request and hand back its answer unread, to be passed on in chunks of at most
        ``max_bytes`` in all (a file fetched for a caller). Close it (``with``) when done. Errors as
        ``request``; an answer that says it is larger than ``max_bytes`` is OutboundError at once."""
        response, _started, deadline, where = self._send(method, url, headers, None, timeout_s,
                                                         accept_encoding="identity")
        stream = OutboundStream(response.status_code, response.headers, response, deadline, where, max_bytes)
        if stream.declared_size is not None and stream.declared_size > max_bytes and response.status_code < 300:
            stream.close()
            raise stream.too_large()
        return stream

    def _send(self, method: str, url: str, headers: Mapping[str, str] | None, body: bytes | None,
              timeout_s: float | None, accept_encoding: str = "gzip, deflate"):
        host, port = self._checked(url)
        if not isinstance(method, str) or not _METHOD.match(method.upper()):
            raise refused("the HTTP method is not valid", "request")
        where = f"{host}:{port}"
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        if body is not None and not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError("body must be bytes")
        merged = CaseInsensitiveDict({"User-Agent": self.user_agent, "Accept": "*/*",
                                      "Accept-Encoding": accept_encoding})
        merged.update(headers or {})
        started = time.monotonic()
        try:
            prepared = requests.Request(method.upper(), url, headers=merged,
                                        data=bytes(body) if body is not None else None).prepare()
        except requests.exceptions.InvalidHeader:
            raise refused("a request header is not valid", "request") from None
        except (requests.exceptions.RequestException, ValueError):
            raise refused("the URL is not valid") from None
        try:
            response = self._adapter.send(prepared, stream=True, verify=True, cert=None, proxies={},
                                          timeout=urllib3.Timeout(total=timeout))
        except OutboundRefusedError:
            raise
        except Exception as exc:  # noqa: BLE001 - every transport failure is one short error
            raise OutboundError(f"Outbound call to {where} failed: {_describe(exc)}.") from None
        return response, started, started + timeout, where

    def _read_body(self, response: requests.Response, deadline: float, where: str) -> bytes:
        limit = self.max_response_bytes
        too_large = OutboundError(f"Outbound call to {where} failed: the response is larger "
                                  f"than {limit} bytes.")
        length = response.headers.get("Content-Length", "")
        if length.strip().isdigit() and int(length) > limit:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                if time.monotonic() > deadline:
                    raise OutboundError(f"Outbound call to {where} failed: timed out while "
                                        "reading the response.")
                chunk = response.raw.read1(_READ_CHUNK, decode_content=True)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
        except OutboundError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise OutboundError(f"Outbound call to {where} failed: {_describe(exc)}.") from None
        return b"".join(chunks)


def _describe(exc: BaseException) -> str:
    """A short, path-free reason for a transport failure."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 12 and seen not in chain:
        chain.append(seen)
        inner = getattr(seen, "reason", None)
        if not isinstance(inner, BaseException):
            inner = seen.args[0] if seen.args and isinstance(seen.args[0], BaseException) else None
        seen = inner or seen.__cause__ or seen.__context__
    kinds = tuple(type(e) for e in chain)

    def has(*types: type) -> bool:
        return any(issubclass(k, types) for k in kinds)

    if has(NameResolutionError, socket.gaierror):
        return "the host name could not be resolved"
    if has(ConnectionRefusedError):
        return "connection refused"
    # urllib3's NewConnectionError subclasses its ConnectTimeoutError: not every one is a timeout.
    if has(TimeoutError, requests.exceptions.Timeout) or any(
            isinstance(e, urllib3.exceptions.TimeoutError) and not isinstance(e, NewConnectionError)
            for e in chain):
        return "timed out"
    if has(requests.exceptions.SSLError, urllib3.exceptions.SSLError):
        if any("CERTIFICATE_VERIFY_FAILED" in str(e) or "certificate" in str(e).lower() for e in chain):
            return "TLS certificate verification failed"
        return "TLS handshake failed"
    if has(ConnectionResetError, BrokenPipeError):
        return "the connection was reset"
    if has(urllib3.exceptions.ProtocolError, requests.exceptions.ChunkedEncodingError):
        return "the server broke the HTTP protocol or closed the connection"
    if has(urllib3.exceptions.DecodeError, requests.exceptions.ContentDecodingError):
        return "the response could not be decoded"
    if has(NewConnectionError, requests.exceptions.ConnectionError, OSError):
        return "could not connect"
    return "unexpected error"
