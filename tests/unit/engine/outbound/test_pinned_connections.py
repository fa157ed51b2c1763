"""The contract of engine/outbound/pinned_connections.py: the private parts of urllib3 it relies
on still exist and behave as it assumes. A urllib3 upgrade that changes one fails here, naming it;
the SSRF guard's behaviour through them is tested in test_http.py."""
from __future__ import annotations

import gzip
import hashlib
import inspect
import socket
import textwrap

import pytest
import requests
import urllib3
from urllib3.connection import HTTPConnection
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.response import HTTPResponse
from urllib3.util import connection as urllib3_connection

from engine.outbound.pinned_connections import open_socket, pinned_adapter
from tests.receiver import Answer, Receiver


@pytest.fixture(scope="module")
def receiver():
    server = Receiver(Answer(200, gzip.compress(b"pinned" * 1000), headers={"Content-Encoding": "gzip"})).start()
    yield server
    server.stop()


class Seen:
    """A check that records what it was shown, refusing nothing."""

    def __init__(self):
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, host: str, addresses: list[str]) -> None:
        self.calls.append((host, addresses))


def get(adapter, url: str) -> requests.Response:
    prepared = requests.Request("GET", url).prepare()
    return adapter.send(prepared, stream=True, timeout=urllib3.Timeout(total=5))


def test_the_installed_urllib3_is_the_major_version_this_contract_was_checked_against():
    assert urllib3.__version__.split(".")[0] == "2", \
        "urllib3 changed its major version: review engine/outbound/pinned_connections.py (every test here)"


def test_a_request_opens_its_socket_through_the_replaced_new_conn_with_the_host_name(receiver):
    """PoolManager builds its pools from pool_classes_by_scheme, a connection gets its socket from
    _new_conn, and _dns_host holds the name the URL gave (not an address yet)."""
    seen = Seen()
    adapter = pinned_adapter(seen, max_retries=0)
    port = receiver.url.rsplit(":", 1)[1]
    try:
        response = get(adapter, f"http://localhost:{port}/contract")
        assert response.status_code == 200
        assert response.raw.read1(65_536, decode_content=True).startswith(b"pinned")  # read1 decodes gzip
        response.close()
    finally:
        adapter.close()
    assert seen.calls and seen.calls[0][0] == "localhost"
    assert "127.0.0.1" in seen.calls[0][1] or "::1" in seen.calls[0][1]


def test_a_check_that_raises_stops_the_connection_and_its_error_reaches_the_caller(receiver):
    class Refused(Exception):
        pass

    def refuse(host, addresses):
        raise Refused(host)

    adapter = pinned_adapter(refuse, max_retries=0)
    try:
        with pytest.raises(Refused):
            get(adapter, receiver.url + "/refused")
    finally:
        adapter.close()
    assert all(r.path != "/refused" for r in receiver.requests)


@pytest.mark.parametrize("host, dns_host", [("example.org", "example.org"), ("example.org.", "example.org."),
                                            ("::1", "::1")])
def test_dns_host_is_the_name_to_resolve_and_the_options_are_where_open_socket_reads_them(host, dns_host):
    conn = HTTPConnection(host, 8080, timeout=3.0, source_address=None)
    assert conn._dns_host == dns_host and conn.host == dns_host.rstrip(".") and conn.port == 8080
    assert conn.timeout == 3.0 and conn.source_address is None
    assert list(conn.socket_options) == list(HTTPConnection.default_socket_options)


def test_the_errors_open_socket_raises_are_constructed_as_urllib3_does(monkeypatch):
    def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)  # the standard library's, not ours
    conn = HTTPConnection("unresolvable.invalid", 80, timeout=1.0)
    with pytest.raises(NameResolutionError) as caught:
        open_socket(conn, None)
    assert "unresolvable.invalid" in str(caught.value)
    error = NewConnectionError(conn, "Failed to establish a new connection: refused")
    assert isinstance(error, ConnectTimeoutError)  # http._describe tells the two apart for this reason
    assert "timed out" in str(ConnectTimeoutError(conn, "Connection to x timed out. (connect timeout=1)"))


def test_connection_refused_is_a_new_connection_error_as_urllib3s_own_raises():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    conn = HTTPConnection("127.0.0.1", port, timeout=1.0)
    with pytest.raises(NewConnectionError):
        open_socket(conn, None)
    with pytest.raises(NewConnectionError):
        HTTPConnection("127.0.0.1", port, timeout=1.0)._new_conn()


def test_read1_takes_decode_content():
    assert "decode_content" in inspect.signature(HTTPResponse.read1).parameters


def source_hash(function) -> str:
    return hashlib.sha256(textwrap.dedent(inspect.getsource(function)).encode()).hexdigest()[:16]


# What open_socket copies: compare it with urllib3's new code, then update the hash.
COPIED = {"HTTPConnection._new_conn": (HTTPConnection._new_conn, "ef30aed76992130a"),
          "util.connection.create_connection": (urllib3_connection.create_connection, "ebc7b96a8ed79d81")}


@pytest.mark.parametrize("name", COPIED)
def test_what_open_socket_copies_from_urllib3_is_unchanged_there(name):
    function, pinned = COPIED[name]
    assert source_hash(function) == pinned, \
        f"urllib3's {name} changed: compare engine/outbound/pinned_connections.open_socket with it"
