"""urllib3's private connection hook, in one place: HTTP connections whose socket goes to an
address that a check has approved, so the address checked is the address connected.

urllib3 2 opens a connection's socket in ``HTTPConnection._new_conn``, resolving the private
``_dns_host``; a ``PoolManager`` builds its pools from ``pool_classes_by_scheme``. Both are
replaced here, and ``_new_conn``'s replacement does what urllib3's own does (``create_connection``:
socket options, timeout, source address, the audit event, the same exceptions) with the
resolution checked in between. tests/unit/engine/outbound/test_pinned_connections.py holds every
part to what this module assumes (and pins the source of what it copies), so a urllib3 upgrade
that changes one fails there.
"""
from __future__ import annotations

import functools
import socket
import sys
from typing import Any, Callable

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util.connection import allowed_gai_family

# Called with the host name and every address it resolved to, before any is connected to: raises
# to refuse the connection (the exception goes up to the caller of the request as it is).
Check = Callable[[str, list[str]], None]


def pinned_adapter(check: Check | None, **options: Any) -> HTTPAdapter:
    """A requests adapter whose connections resolve once, let ``check`` see every address (None:
    no check) and connect to one of exactly those; ``options`` go to ``HTTPAdapter``."""
    return _PinnedAdapter(check, **options)


def open_socket(conn: HTTPConnection, check: Check | None) -> socket.socket:
    """Replaces ``HTTPConnection._new_conn``; ``conn.host`` (Host header, SNI, certificate name)
    stays the host name."""
    host = conn._dns_host.strip("[]").rstrip(".")
    try:
        infos = socket.getaddrinfo(host, conn.port, allowed_gai_family(), socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise NameResolutionError(conn.host, conn, e) from e
    except UnicodeError as e:
        raise NameResolutionError(conn.host, conn, socket.gaierror(str(e))) from e
    if not infos:
        raise NameResolutionError(conn.host, conn, socket.gaierror("no addresses"))
    if check is not None:
        check(host, [info[4][0] for info in infos])
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
def pool_classes(check: Check | None) -> dict[str, type]:
    """Connection pool classes (by scheme) whose connections open their sockets with ``open_socket``."""
    def new_conn(self: HTTPConnection) -> socket.socket:
        return open_socket(self, check)

    http_conn = type("PinnedHTTPConnection", (HTTPConnection,), {"_new_conn": new_conn})
    https_conn = type("PinnedHTTPSConnection", (HTTPSConnection,), {"_new_conn": new_conn})
    return {
        "http": type("PinnedHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": http_conn}),
        "https": type("PinnedHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": https_conn}),
    }


class _PinnedAdapter(HTTPAdapter):
    def __init__(self, check: Check | None, **kwargs: Any):
        self._check = check
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = pool_classes(self._check)
