"""Outbound HTTP with an SSRF guard: the one way Baton calls other servers.

Every outbound call to an address that comes from a tenant (web-chat delivery, HTTP tasks, headless
tasks' CRM webhooks) goes through ``OutboundHttp.request``. (The AI model endpoint is the operator's
own configuration, ``BATON_AI_BASE_URL``, and is called by the ``openai`` client in ``ai/``.) Unless the operator allows private addresses (``BATON_ALLOW_PRIVATE_URLS``):

* ``check_url`` (no DNS) refuses anything but ``http``/``https`` URLs with a plain host and a sane
  port: no user info, no ``localhost``-style names, no IP literal (in any notation) that is not public.
* When a connection is opened, the host is resolved once with ``socket.getaddrinfo``; **every**
  address must be public, and the socket connects to exactly those checked addresses. The Host
  header, TLS SNI and certificate verification still use the host name, because only the socket
  creation of urllib3's connection classes is replaced. A second DNS answer (rebinding) is never
  consulted, and pooled connections are only ever connected to checked addresses.
* Redirects are never followed (a 3xx is returned as it is), environment proxies and ``.netrc`` are
  ignored, and no cookies are kept between calls.

Failures become ``OutboundRefusedError`` (the URL is not allowed) or ``OutboundError`` (connection,
timeout, response too large, not JSON) with a short message that names the host but never the path
or query (they may carry tokens).
"""
from __future__ import annotations

import datetime
import email.utils
import functools
import ipaddress
import json as jsonlib
import math
import re
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util.connection import allowed_gai_family

from engine.errors import OutboundError, OutboundRefusedError

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_READ_CHUNK = 65_536

# --- which addresses are public -------------------------------------------------------------------

_METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",   # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
    "169.254.170.2",     # AWS ECS task metadata
    "100.100.100.200",   # Alibaba Cloud
    "168.63.129.16",     # Azure wire server (a public address, so listed by name)
    "fd00:ec2::254",     # AWS IMDS over IPv6
))


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]:
    return tuple((ipaddress.ip_network(net), kind) for net, kind in pairs)


# Checked in order; the first match names the kind. Python's own is_global is the final catch-all.
_V4_BLOCKED = _nets(
    ("0.0.0.0/32", "unspecified"), ("0.0.0.0/8", "reserved"), ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "private"), ("127.0.0.0/8", "loopback"), ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"), ("192.0.0.0/24", "reserved"), ("192.0.2.0/24", "reserved"),
    ("192.88.99.0/24", "reserved"), ("192.168.0.0/16", "private"), ("198.18.0.0/15", "reserved"),
    ("198.51.100.0/24", "reserved"), ("203.0.113.0/24", "reserved"), ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
)
_V6_BLOCKED = _nets(
    ("::/128", "unspecified"), ("::1/128", "loopback"), ("fe80::/10", "link-local"),
    ("fc00::/7", "private"), ("fec0::/10", "private"), ("ff00::/8", "multicast"),
    ("64:ff9b:1::/48", "private"), ("100::/64", "reserved"), ("2001::/23", "reserved"),
    ("2001:db8::/32", "reserved"), ("3fff::/20", "reserved"),
)
_V6_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def address_refusal(address: str | IpAddress) -> str | None:
    """Why ``address`` must not be contacted: 'loopback', 'private', 'link-local', 'metadata',
    'multicast', 'reserved' or 'unspecified'; None when it is a public address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(ip.compressed.split("%", 1)[0])
        if ip.ipv4_mapped is not None:                     # ::ffff:a.b.c.d is a.b.c.d
            return address_refusal(ip.ipv4_mapped)
        embedded = None
        if ip in _NAT64:                                    # 64:ff9b::a.b.c.d reaches a.b.c.d
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        elif ip.sixtofour is not None:                      # 2002:AABB:CCDD::/48 reaches a.b.c.d
            embedded = ip.sixtofour
        if embedded is not None and (kind := address_refusal(embedded)):
            return kind
    if ip in _METADATA:
        return "metadata"
    for net, kind in (_V4_BLOCKED if ip.version == 4 else _V6_BLOCKED):
        if ip in net:
            return kind
    if ip.version == 6 and ip not in _V6_GLOBAL_UNICAST and ip not in _NAT64:
        return "reserved"                                   # includes ::/96 (IPv4-compatible)
    if ip.is_multicast:
        return "multicast"
    if not ip.is_global and ip not in _NAT64:
        return "reserved"
    return None


# --- URL checks (no DNS) --------------------------------------------------------------------------

_LOCAL_NAMES = ("localhost", "localdomain", "local", "internal", "home.arpa")
_NUMERIC_HOST = re.compile(r"^[0-9a-fx.]+$")        # inet_aton forms: 2130706433, 0x7f.1, 0177.0.0.1
_METHOD = re.compile(r"^[A-Z]{1,20}$")
_HOST_NAME = re.compile(r"^[a-z0-9_](?:[a-z0-9_.-]{0,251}[a-z0-9_])?$")


def _refuse(message: str, what: str = "URL") -> OutboundRefusedError:
    return OutboundRefusedError(f"The outbound {what} is not allowed: {message}.")


def _literal_address(host: str) -> IpAddress | None:
    """The IP address a host names literally (any notation getaddrinfo accepts), else None."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC_HOST.match(host) and not host.endswith("."):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _parse(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an acceptable URL, or OutboundRefusedError."""
    if not isinstance(url, str) or not url:
        raise _refuse("the URL is empty")
    if len(url) > 8192:
        raise _refuse("the URL is too long")
    if any(ord(c) <= 0x20 or c in "\\\x7f" for c in url):
        raise _refuse("the URL contains spaces, control characters or backslashes")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise _refuse("the URL's port is not a number from 1 to 65535") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise _refuse("only http and https URLs can be called")
    if "@" in parts.netloc:
        raise _refuse("the URL must not carry a user name or password")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise _refuse("the URL has no host")
    if port is None:
        port = 443 if scheme == "https" else 80
    elif not 1 <= port <= 65535:
        raise _refuse("the URL's port is not a number from 1 to 65535")
    if parts.netloc.startswith("["):
        if "%" in host:
            raise _refuse("IPv6 zone identifiers are not allowed")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _refuse("the address in brackets is not an IPv6 address") from None
        return scheme, host, port
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise _refuse("the host name is not valid") from None
    if not _HOST_NAME.match(ascii_host) or any(not label for label in ascii_host.split(".")):
        raise _refuse("the host name is not valid")
    return scheme, ascii_host, port


# --- pinned connections ---------------------------------------------------------------------------

def _open_checked_socket(conn: HTTPConnection, allow_private: bool) -> socket.socket:
    """Resolve once, check every address, connect to one of exactly those addresses.

    Replaces urllib3's ``HTTPConnection._new_conn``; ``conn.host`` (Host header, SNI, certificate
    name) stays the host name."""
    host = conn._dns_host.strip("[]").rstrip(".")
    try:
        infos = socket.getaddrinfo(host, conn.port, allowed_gai_family(), socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise NameResolutionError(conn.host, conn, e) from e
    except UnicodeError as e:
        raise NameResolutionError(conn.host, conn, socket.gaierror(str(e))) from e
    if not infos:
        raise NameResolutionError(conn.host, conn, socket.gaierror("no addresses"))
    if not allow_private:
        for info in infos:
            kind = address_refusal(info[4][0])
            if kind:
                raise _refuse(f"{host} resolves to {info[4][0]}, a {kind} address")
    err: OSError | None = None
    for family, socktype, proto, _canonname, sockaddr in infos:
        sock = None
        try:
            sock = socket.socket(family, socktype, proto)
            for option in conn.socket_options or ():
                sock.setsockopt(*option)
            if isinstance(conn.timeout, (int, float)):
                sock.settimeout(conn.timeout)
            if conn.source_address:
                sock.bind(conn.source_address)
            sock.connect(sockaddr)
            sys.audit("http.client.connect", conn, conn.host, conn.port)
            return sock
        except OSError as e:
            err = e
            if sock is not None:
                sock.close()
    assert err is not None
    if isinstance(err, TimeoutError):
        raise ConnectTimeoutError(
            conn, f"Connection to {conn.host} timed out. (connect timeout={conn.timeout})") from err
    raise NewConnectionError(conn, f"Failed to establish a new connection: {err}") from err


@functools.lru_cache(maxsize=None)
def _pool_classes(allow_private: bool) -> dict[str, type]:
    """Connection pool classes whose connections open their sockets through the guard."""
    def new_conn(self: HTTPConnection) -> socket.socket:
        return _open_checked_socket(self, allow_private)

    http_conn = type("PinnedHTTPConnection", (HTTPConnection,), {"_new_conn": new_conn})
    https_conn = type("PinnedHTTPSConnection", (HTTPSConnection,), {"_new_conn": new_conn})
    return {
        "http": type("PinnedHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": http_conn}),
        "https": type("PinnedHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": https_conn}),
    }


class _PinnedAdapter(HTTPAdapter):
    def __init__(self, allow_private: bool, **kwargs: Any):
        self._allow_private = allow_private
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _pool_classes(self._allow_private)


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


# --- the client -----------------------------------------------------------------------------------

class OutboundHttp:
    """A thread-safe HTTP client with the SSRF guard; one per process is enough."""

    def __init__(self, *, allow_private: bool, timeout_s: float = 10.0,
                 max_response_bytes: int = 1_048_576, user_agent: str = "Baton/1.0"):
        self.allow_private = bool(allow_private)
        self.timeout_s = float(timeout_s)
        self.max_response_bytes = int(max_response_bytes)
        self.user_agent = user_agent
        self._adapter = _PinnedAdapter(self.allow_private, pool_connections=32, pool_maxsize=16,
                                       max_retries=0)

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
        _scheme, host, port = _parse(url)
        if self.allow_private:
            return host, port
        literal = _literal_address(host)
        if literal is not None:
            kind = address_refusal(literal)
            if kind:
                raise _refuse(f"{host} is a {kind} address")
        elif any(host == name or host.endswith("." + name) for name in _LOCAL_NAMES):
            raise _refuse(f"{host} is a local name")
        return host, port

    # -- requests --

    def request(self, method: str, url: str, *, headers: Mapping[str, str] | None = None,
                body: bytes | None = None, timeout_s: float | None = None) -> OutboundResponse:
        """Send one request and read the whole answer (at most ``max_response_bytes``).

        Raises OutboundRefusedError (URL or resolved address not allowed) or OutboundError
        (name resolution, connection, TLS, timeout, response too large); any status is returned."""
        host, port = self._checked(url)
        if not isinstance(method, str) or not _METHOD.match(method.upper()):
            raise _refuse("the HTTP method is not valid", "request")
        where = f"{host}:{port}"
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        if body is not None and not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError("body must be bytes")
        merged = CaseInsensitiveDict({"User-Agent": self.user_agent, "Accept": "*/*",
                                      "Accept-Encoding": "gzip, deflate"})
        merged.update(headers or {})
        started = time.monotonic()
        try:
            prepared = requests.Request(method.upper(), url, headers=merged,
                                        data=bytes(body) if body is not None else None).prepare()
        except requests.exceptions.InvalidHeader:
            raise _refuse("a request header is not valid", "request") from None
        except (requests.exceptions.RequestException, ValueError):
            raise _refuse("the URL is not valid") from None
        try:
            response = self._adapter.send(prepared, stream=True, verify=True, cert=None, proxies={},
                                          timeout=urllib3.Timeout(total=timeout))
        except OutboundRefusedError:
            raise
        except Exception as exc:  # noqa: BLE001 - every transport failure is one short error
            raise OutboundError(f"Outbound call to {where} failed: {_describe(exc)}.") from None
        try:
            content = self._read_body(response, started + timeout, where)
        finally:
            response.close()
        return OutboundResponse(status=response.status_code, headers=response.headers,
                                body=content, elapsed_s=time.monotonic() - started)

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
