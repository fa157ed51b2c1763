"""Outbound HTTP: the SSRF guard, address pinning, and the client against a real local server.

No test touches the network beyond 127.0.0.1: an autouse guard replaces ``socket.socket.connect``,
records every attempt, lets loopback through, sends "routed" public addresses to a local server and
refuses everything else. Name resolution is scripted by patching the standard library's
``socket.getaddrinfo`` (not our code).
"""
from __future__ import annotations

import email.utils
import errno
import gzip
import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from engine.errors import BatonError, InvalidParamsError, OutboundError, OutboundRefusedError
from engine.outbound import OutboundHttp, OutboundResponse
from engine.outbound.guard import address_refusal

PUBLIC_IP = "93.184.215.14"          # a public address; the guard never lets a socket reach it
OTHER_PUBLIC_IP = "93.184.215.15"


# --- fixtures: network guard, scripted resolver, local server ------------------------------------

class NetworkGuard:
    def __init__(self):
        self.attempts: list[tuple[str, int]] = []
        self.routes: dict[tuple[str, int], tuple[str, int]] = {}


@pytest.fixture(autouse=True)
def guard(monkeypatch):
    """Every socket connect is recorded; only loopback and explicitly routed addresses connect."""
    state = NetworkGuard()
    real_connect = socket.socket.connect

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            target = (address[0], address[1])
            state.attempts.append(target)
            if target in state.routes:
                return real_connect(sock, state.routes[target])
            if address[0] not in ("127.0.0.1", "::1"):
                raise OSError(errno.ENETUNREACH, "test network guard: not a loopback address")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return state


class Resolver:
    """Scripted answers per host name: a list of answers, one per getaddrinfo call (the last repeats)."""

    def __init__(self, real):
        self.real = real
        self.script: dict[str, list[list[tuple[str, int | None]]]] = {}
        self.calls: list[str] = []

    def answer(self, host: str, *answers: list[tuple[str, int | None]]) -> None:
        self.script[host] = list(answers)

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        if host not in self.script:
            return self.real(host, port, family, type, proto, flags)
        self.calls.append(host)
        answers = self.script[host]
        addresses = answers.pop(0) if len(answers) > 1 else answers[0]
        result = []
        for ip, real_port in addresses:
            use_port = real_port if real_port is not None else int(port)
            if ":" in ip:
                result.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (ip, use_port, 0, 0)))
            else:
                result.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, use_port)))
        return result


@pytest.fixture
def resolver(monkeypatch):
    fake = Resolver(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=(), length=True):
        try:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            if length:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass                                     # the client gave up (timeout tests)

    def handle_any(self):
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append({"method": self.command, "path": url.path,
                                 "headers": dict(self.headers.items()), "body": body})
        port = self.server.server_address[1]
        if url.path == "/echo":
            self.reply(200, json.dumps({"received": len(body)}).encode(),
                       [("Content-Type", "application/json")])
        elif url.path == "/json":
            self.reply(200, b'{"hello": "world", "n": 1}', [("Content-Type", "application/json")])
        elif url.path == "/text":
            self.reply(200, b"<html>not json</html>", [("Content-Type", "text/html")])
        elif url.path == "/fail":
            self.reply(500, b"boom")
        elif url.path == "/slow":
            self.server.stop.wait(3)
            self.reply(200, b"late")
        elif url.path == "/big":
            self.reply(200, b"x" * int(query["n"]))
        elif url.path == "/big-unsized":             # HTTP/1.0, ends when the connection closes
            self.reply(200, b"y" * int(query["n"]), length=False)
        elif url.path == "/bomb":
            self.reply(200, gzip.compress(b"\0" * int(query["n"])), [("Content-Encoding", "gzip")])
        elif url.path == "/redirect":
            self.reply(302, b"", [("Location", f"http://127.0.0.1:{port}/echo")])
        elif url.path == "/retry":
            self.reply(503, b"busy", [("Retry-After", "120")])
        else:
            self.reply(404, b"no")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_any


class Handler11(Handler):
    protocol_version = "HTTP/1.1"                   # keeps connections open between requests


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64


def start_server(handler):
    srv = Server(("127.0.0.1", 0), handler)
    srv.seen = []
    srv.stop = threading.Event()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return srv, thread


def stop_server(srv, thread):
    srv.stop.set()
    srv.shutdown()
    srv.server_close()
    thread.join(5)


@pytest.fixture(scope="module")
def server():
    srv, thread = start_server(Handler)
    yield srv
    stop_server(srv, thread)


@pytest.fixture(scope="module")
def keepalive_server():
    srv, thread = start_server(Handler11)
    yield srv
    stop_server(srv, thread)


@pytest.fixture
def local(server):
    """The local server, its request log cleared, and its base URL."""
    server.seen.clear()
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    return server


@pytest.fixture
def open_client():
    client = OutboundHttp(allow_private=True, timeout_s=5)
    yield client
    client.close()


@pytest.fixture
def guarded_client():
    client = OutboundHttp(allow_private=False, timeout_s=5)
    yield client
    client.close()


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the errors ---------------------------------------------------------------------------------

def test_the_two_outbound_errors_belong_to_the_error_tree_with_their_reason_words():
    assert issubclass(OutboundRefusedError, BatonError) and issubclass(OutboundError, BatonError)
    assert OutboundRefusedError().rpc_data() == {"reason": "outbound_refused"}
    assert OutboundError().rpc_data() == {"reason": "outbound_failed"}
    assert issubclass(OutboundRefusedError, InvalidParamsError)   # a bad URL in params is a 400
    assert OutboundError.http_status == 502


# --- which addresses are public -----------------------------------------------------------------

@pytest.mark.parametrize("address, kind", [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("10.0.0.1", "private"), ("172.16.5.4", "private"), ("192.168.1.1", "private"),
    ("100.64.0.1", "private"), ("fd00::1", "private"), ("fc00::1", "private"),
    ("169.254.169.254", "metadata"), ("fd00:ec2::254", "metadata"), ("100.100.100.200", "metadata"),
    ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"), ("0.1.2.3", "reserved"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("ff02::1", "multicast"),
    ("192.0.2.1", "reserved"), ("198.51.100.7", "reserved"), ("203.0.113.9", "reserved"),
    ("198.18.0.1", "reserved"), ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"),
    ("2001:db8::1", "reserved"), ("::7f00:1", "reserved"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.1.2.3", "private"),
    ("::ffff:169.254.169.254", "metadata"),
    ("64:ff9b::7f00:1", "loopback"), ("2002:a00:1::1", "private"), ("2001::1", "reserved"),
])
def test_address_refusal_names_why_a_non_public_address_is_refused(address, kind):
    assert address_refusal(address) == kind


@pytest.mark.parametrize("address", [
    "8.8.8.8", "1.1.1.1", PUBLIC_IP, "2606:4700:4700::1111", "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8", "64:ff9b::808:808",
])
def test_address_refusal_accepts_public_addresses(address):
    assert address_refusal(address) is None


# --- check_url: static, no DNS ------------------------------------------------------------------

@pytest.mark.parametrize("url, words", [
    ("http://127.0.0.1/", "loopback"),
    ("http://127.0.0.1:8080/hook", "loopback"),
    ("http://localhost/", "local name"),
    ("http://LOCALHOST./", "local name"),
    ("http://app.localhost/", "local name"),
    ("http://metadata.google.internal/computeMetadata/v1/", "local name"),
    ("http://[::1]/", "loopback"),
    ("http://10.0.0.1/", "private"),
    ("http://169.254.169.254/latest/meta-data", "metadata"),
    ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://[::ffff:7f00:1]/", "loopback"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://2130706433/", "loopback"),
    ("http://0x7f000001/", "loopback"),
    ("http://0177.0.0.1/", "loopback"),
    ("http://127.1/", "loopback"),
    ("http://[fd00::1]/", "private"),
    ("http://[fe80::1%25eth0]/", "zone"),
    ("http://192.0.2.10/", "reserved"),
    ("file:///etc/passwd", "only http and https"),
    ("ftp://example.com/x", "only http and https"),
    ("gopher://example.com:70/_x", "only http and https"),
    ("javascript:alert(1)", "only http and https"),
    ("//example.com/x", "only http and https"),
    ("http://user:pw@example.com/", "user name or password"),
    ("http://user@example.com/", "user name or password"),
    ("http://example.com@127.0.0.1/", "user name or password"),
    ("http://example.com:0/", "port"),
    ("http://example.com:65536/", "port"),
    ("http://example.com:http/", "port"),
    ("http:///path-only", "no host"),
    ("http://exa mple.com/", "spaces"),
    ("http://example.com\\@127.0.0.1/", "backslashes"),
    ("http://example.com/\r\nX-Injected: 1", "control characters"),
    ("http://-bad-.example.com./", "host name is not valid"),
    ("http://a..b/", "host name is not valid"),
    ("http://[v1.fe80::a]/", "not an IPv6 address"),
    ("", "empty"),
])
def test_check_url_refuses_urls_that_must_never_be_called(guarded_client, resolver, url, words):
    with pytest.raises(OutboundRefusedError) as caught:
        guarded_client.check_url(url)
    assert words in caught.value.message
    assert caught.value.reason == "outbound_refused"
    assert resolver.calls == []


@pytest.mark.parametrize("url", [
    "https://hooks.example.com/baton?x=1", "http://93.184.215.14:8080/x",
    "https://[2606:4700:4700::1111]/hook", "HTTPS://Hooks.Example.COM/", "https://bücher.example/",
])
def test_check_url_accepts_public_http_urls_without_resolving_them(guarded_client, resolver, url):
    resolver.answer("hooks.example.com", [("127.0.0.1", None)])
    assert guarded_client.check_url(url) is None
    assert resolver.calls == []


def test_check_url_with_private_addresses_allowed_accepts_local_receivers(open_client):
    for url in ("http://127.0.0.1:8080/hook", "http://localhost:9000/", "http://[::1]:81/",
                "http://10.1.2.3/"):
        assert open_client.check_url(url) is None


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "http://u:p@127.0.0.1/", "http://127.0.0.1:0/",
                                 "file:///etc/passwd"])
def test_check_url_with_private_addresses_allowed_still_refuses_bad_schemes_userinfo_and_ports(
        open_client, url):
    with pytest.raises(OutboundRefusedError):
        open_client.check_url(url)


# --- request: refusals happen before any connection -------------------------------------------

@pytest.mark.parametrize("url", [
    "http://127.0.0.1/", "http://localhost/", "http://[::1]/", "http://10.0.0.1/",
    "http://169.254.169.254/latest/meta-data", "http://[::ffff:127.0.0.1]/", "http://0.0.0.0/",
    "http://2130706433/", "file:///etc/passwd", "ftp://example.com/", "gopher://example.com/",
    "http://user:pw@example.com/",
])
def test_request_refuses_forbidden_urls_without_connecting(guarded_client, guard, url):
    with pytest.raises(OutboundRefusedError):
        guarded_client.request("GET", url)
    assert guard.attempts == []


def test_a_host_name_that_resolves_to_loopback_is_refused_without_connecting(
        guarded_client, guard, resolver, local):
    resolver.answer("sneaky.example.com", [("127.0.0.1", local.server_address[1])])
    guarded_client.check_url("http://sneaky.example.com/echo")       # no DNS at check time
    with pytest.raises(OutboundRefusedError) as caught:
        guarded_client.request("POST", "http://sneaky.example.com/echo", body=b"{}")
    assert "127.0.0.1" in caught.value.message and "loopback" in caught.value.message
    assert resolver.calls == ["sneaky.example.com"]
    assert guard.attempts == [] and local.seen == []


def test_localhost_is_refused_even_when_the_url_has_a_port(guarded_client, guard, local):
    port = local.server_address[1]
    with pytest.raises(OutboundRefusedError):
        guarded_client.request("GET", f"http://localhost:{port}/echo")
    assert guard.attempts == [] and local.seen == []


def test_a_host_with_one_public_and_one_private_address_is_refused(guarded_client, guard, resolver):
    resolver.answer("mixed.example.com", [(PUBLIC_IP, None), ("10.0.0.5", None)])
    with pytest.raises(OutboundRefusedError) as caught:
        guarded_client.request("GET", "http://mixed.example.com/")
    assert "10.0.0.5" in caught.value.message
    assert guard.attempts == []


def test_a_host_resolving_to_an_ipv6_metadata_address_is_refused(guarded_client, guard, resolver):
    resolver.answer("imds.example.com", [("fd00:ec2::254", None)])
    with pytest.raises(OutboundRefusedError) as caught:
        guarded_client.request("GET", "http://imds.example.com/latest/meta-data")
    assert "metadata" in caught.value.message
    assert guard.attempts == []


def test_a_header_with_a_line_break_or_a_bad_method_is_refused_without_connecting(open_client, guard):
    with pytest.raises(OutboundRefusedError, match="header"):
        open_client.request("POST", "http://127.0.0.1:9/", headers={"X-Evil": "a\r\nHost: other"})
    with pytest.raises(OutboundRefusedError, match="method"):
        open_client.request("GET / HTTP/1.1\r\n", "http://127.0.0.1:9/")
    assert guard.attempts == []


# --- pinning: the socket goes to the checked address ------------------------------------------

def test_the_connection_goes_to_the_checked_address_with_the_original_host_header(
        guarded_client, guard, resolver, local):
    resolver.answer("hooks.example.com", [(PUBLIC_IP, None)])
    guard.routes[(PUBLIC_IP, 80)] = local.server_address        # "the public server" is local
    answer = guarded_client.request("POST", "http://hooks.example.com/echo", body=b"hi")
    assert answer.status == 200
    assert guard.attempts == [(PUBLIC_IP, 80)]
    assert resolver.calls == ["hooks.example.com"]
    assert [r["headers"]["Host"] for r in local.seen] == ["hooks.example.com"]


def test_dns_rebinding_after_the_check_never_reaches_a_loopback_server(
        guarded_client, guard, resolver, local):
    port = local.server_address[1]
    resolver.answer("rebind.example.com", [(PUBLIC_IP, port)], [("127.0.0.1", port)])
    with pytest.raises(OutboundError) as caught:                 # the public address is unreachable
        guarded_client.request("GET", f"http://rebind.example.com:{port}/echo")
    assert "could not connect" in caught.value.message
    assert guard.attempts == [(PUBLIC_IP, port)]                 # only the checked address was tried
    assert resolver.calls == ["rebind.example.com"]               # resolved once, not again to connect
    with pytest.raises(OutboundRefusedError):                     # the next resolution is checked too
        guarded_client.request("GET", f"http://rebind.example.com:{port}/echo")
    assert ("127.0.0.1", port) not in guard.attempts
    assert local.seen == []


def test_a_new_connection_after_a_successful_one_is_checked_again(
        guarded_client, guard, resolver, local):
    resolver.answer("flip.example.com", [(PUBLIC_IP, None)], [("127.0.0.1", local.server_address[1])])
    guard.routes[(PUBLIC_IP, 80)] = local.server_address
    assert guarded_client.request("GET", "http://flip.example.com/echo").status == 200
    with pytest.raises(OutboundRefusedError):      # the server closed the connection: new resolution
        guarded_client.request("GET", "http://flip.example.com/echo")
    assert len(local.seen) == 1 and guard.attempts == [(PUBLIC_IP, 80)]


def test_a_failing_checked_address_falls_back_only_to_other_checked_addresses(
        guarded_client, guard, resolver, local):
    resolver.answer("two.example.com", [(OTHER_PUBLIC_IP, None), (PUBLIC_IP, None)])
    guard.routes[(PUBLIC_IP, 80)] = local.server_address
    assert guarded_client.request("GET", "http://two.example.com/echo").status == 200
    assert guard.attempts == [(OTHER_PUBLIC_IP, 80), (PUBLIC_IP, 80)]


def test_pooled_connections_stay_on_the_checked_address_without_resolving_again(
        guarded_client, guard, resolver, keepalive_server):
    keepalive_server.seen.clear()
    resolver.answer("pool.example.com", [(PUBLIC_IP, None)], [("127.0.0.1", None)])
    guard.routes[(PUBLIC_IP, 80)] = keepalive_server.server_address
    for n in range(3):
        assert guarded_client.request("POST", "http://pool.example.com/echo", body=b"%d" % n).status == 200
    assert [r["body"] for r in keepalive_server.seen] == [b"0", b"1", b"2"]
    assert guard.attempts == [(PUBLIC_IP, 80)]           # one connection, reused
    assert resolver.calls == ["pool.example.com"]


@pytest.fixture(scope="module")
def self_signed_cert(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                    "-subj", "/CN=secure.example.com", "-keyout", str(folder / "key.pem"),
                    "-out", str(folder / "cert.pem")], check=True, capture_output=True, timeout=30)
    return folder / "cert.pem", folder / "key.pem"


def test_tls_uses_the_host_name_for_sni_and_verifies_the_certificate(
        guarded_client, guard, resolver, self_signed_cert):
    cert, key = self_signed_cert
    server_names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: server_names.append(name)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(5)

    def serve_one():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            try:
                context.wrap_socket(conn, server_side=True).close()
            except (OSError, ssl.SSLError):
                pass                                   # the client rejects our certificate

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    resolver.answer("secure.example.com", [(PUBLIC_IP, None)])
    guard.routes[(PUBLIC_IP, 443)] = listener.getsockname()
    try:
        with pytest.raises(OutboundError) as caught:
            guarded_client.request("GET", "https://secure.example.com/hook")
    finally:
        thread.join(5)
        listener.close()
    assert "certificate verification failed" in caught.value.message
    assert server_names == ["secure.example.com"]
    assert guard.attempts == [(PUBLIC_IP, 443)]


# --- request against a real local server (private addresses allowed) --------------------------

def test_the_server_receives_method_headers_and_the_exact_body_bytes(open_client, local):
    body = bytes(range(256)) + b'{"chat_id": "c-1"}'
    answer = open_client.request("PUT", local.base + "/echo?x=1", body=body,
                                 headers={"X-Baton-Delivery": "d-42", "Content-Type": "application/json"})
    assert answer.status == 200 and answer.ok
    [seen] = local.seen
    assert seen["method"] == "PUT" and seen["path"] == "/echo"
    assert seen["body"] == body
    assert seen["headers"]["X-Baton-Delivery"] == "d-42"
    assert seen["headers"]["Content-Type"] == "application/json"
    assert seen["headers"]["User-Agent"] == "Baton/1.0"
    assert seen["headers"]["Content-Length"] == str(len(body))
    assert "Cookie" not in seen["headers"] and "Authorization" not in seen["headers"]


def test_a_json_answer_is_parsed_and_headers_are_case_insensitive(open_client, local):
    answer = open_client.request("GET", local.base + "/json")
    assert answer.json() == {"hello": "world", "n": 1}
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["CONTENT-TYPE"] == "application/json"
    assert 0 <= answer.elapsed_s < 5


def test_an_answer_that_is_not_json_raises_a_clear_error(open_client, local):
    answer = open_client.request("GET", local.base + "/text")
    with pytest.raises(OutboundError) as caught:
        answer.json()
    assert "not valid JSON" in caught.value.message


def test_a_500_is_returned_as_a_status_not_raised(open_client, local):
    answer = open_client.request("POST", local.base + "/fail", body=b"{}")
    assert answer.status == 500 and not answer.ok
    assert answer.body == b"boom"


def test_a_slow_server_times_out_quickly_with_an_outbound_error(local):
    with OutboundHttp(allow_private=True, timeout_s=0.5) as client:
        started = time.monotonic()
        with pytest.raises(OutboundError) as caught:
            client.request("GET", local.base + "/slow")
        assert time.monotonic() - started < 2
    assert "timed out" in caught.value.message


def test_a_per_call_timeout_overrides_the_default(open_client, local):
    started = time.monotonic()
    with pytest.raises(OutboundError, match="timed out"):
        open_client.request("GET", local.base + "/slow", timeout_s=0.3)
    assert time.monotonic() - started < 2


def test_connection_refused_raises_a_short_outbound_error_without_the_path(open_client):
    port = unused_port()
    with pytest.raises(OutboundError) as caught:
        open_client.request("POST", f"http://127.0.0.1:{port}/bot123:SECRET/sendMessage", body=b"{}")
    message = caught.value.message
    assert "connection refused" in message and f"127.0.0.1:{port}" in message
    assert "SECRET" not in message and "Traceback" not in message and "\n" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_an_unresolvable_host_raises_an_outbound_error(open_client, resolver):
    def fail(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    resolver.script.clear()
    resolver.real = fail
    with pytest.raises(OutboundError, match="could not be resolved"):
        open_client.request("GET", "http://nowhere.example.com/")


def test_a_response_at_the_size_limit_is_read_whole(local):
    with OutboundHttp(allow_private=True, max_response_bytes=1000) as client:
        assert client.request("GET", local.base + "/big?n=1000").body == b"x" * 1000


@pytest.mark.parametrize("path", ["/big?n=1001", "/big-unsized?n=5000", "/bomb?n=500000"])
def test_a_response_larger_than_the_limit_is_refused(local, path):
    assert len(gzip.compress(b"\0" * 500_000)) < 1000         # the bomb passes the Content-Length check
    with OutboundHttp(allow_private=True, max_response_bytes=1000) as client:
        with pytest.raises(OutboundError) as caught:
            client.request("GET", local.base + path)
    assert "larger than 1000 bytes" in caught.value.message


def test_redirects_are_returned_not_followed(open_client, local):
    answer = open_client.request("GET", local.base + "/redirect")
    assert answer.status == 302
    assert answer.headers["Location"].endswith("/echo")
    assert [r["path"] for r in local.seen] == ["/redirect"]


def test_retry_after_from_a_real_answer(open_client, local):
    answer = open_client.request("POST", local.base + "/retry", body=b"{}")
    assert answer.status == 503 and answer.retry_after_s() == 120.0


def test_concurrent_requests_from_several_threads_all_arrive(open_client, local):
    errors: list[BaseException] = []

    def worker(n):
        try:
            for i in range(5):
                body = f"{n}-{i}".encode()
                assert open_client.request("POST", local.base + "/echo", body=body).status == 200
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert errors == []
    assert sorted(r["body"] for r in local.seen) == sorted(f"{n}-{i}".encode()
                                                            for n in range(8) for i in range(5))


# --- Retry-After ------------------------------------------------------------------------------

def answer_with(headers: dict[str, str]) -> OutboundResponse:
    from requests.structures import CaseInsensitiveDict
    return OutboundResponse(status=503, headers=CaseInsensitiveDict(headers), body=b"", elapsed_s=0.1)


@pytest.mark.parametrize("value, expected", [
    ("120", 120.0), ("0", 0.0), (" 7 ", 7.0),
    ("-5", None), ("1.5", None), ("soon", None), ("", None), ("Sun, 99 Foo 2026 99:99:99 GMT", None),
])
def test_retry_after_seconds(value, expected):
    assert answer_with({"retry-after": value}).retry_after_s() == expected


def test_retry_after_as_an_http_date_counts_from_now():
    now = 1_800_000_000.0
    later = email.utils.formatdate(now + 90, usegmt=True)
    earlier = email.utils.formatdate(now - 90, usegmt=True)
    assert answer_with({"Retry-After": later}).retry_after_s(now=now) == 90.0
    assert answer_with({"Retry-After": earlier}).retry_after_s(now=now) == 0.0


def test_retry_after_beyond_a_day_is_a_day_however_it_is_written():
    now = 1_800_000_000.0
    assert answer_with({"Retry-After": "86401"}).retry_after_s() == 86_400.0
    assert answer_with({"Retry-After": "9" * 5000}).retry_after_s() == 86_400.0  # no overflow, no int limit
    far = email.utils.formatdate(now + 10 * 365 * 86_400, usegmt=True)
    assert answer_with({"Retry-After": far}).retry_after_s(now=now) == 86_400.0


def test_retry_after_is_none_when_absent():
    assert answer_with({}).retry_after_s() is None


# --- streamed answers (a file passed on to a caller) ---------------------------------------------------

def test_stream_passes_the_body_on_in_chunks_within_the_limit(open_client, local):
    with open_client.stream("GET", f"{local.base}/big?n=200000", max_bytes=200_000) as answer:
        assert (answer.status, answer.declared_size) == (200, 200_000)
        assert b"".join(answer.chunks()) == b"x" * 200_000


def test_stream_refuses_an_answer_that_says_it_is_too_large_before_reading_it(open_client, local):
    with pytest.raises(OutboundError) as refused:
        open_client.stream("GET", f"{local.base}/big?n=200001", max_bytes=200_000)
    assert "larger than 200000 bytes" in refused.value.message


def test_stream_cuts_off_an_unsized_answer_that_grows_past_the_limit(open_client, local):
    answer = open_client.stream("GET", f"{local.base}/big-unsized?n=300000", max_bytes=100_000)
    received = []
    with pytest.raises(OutboundError) as cut:
        for chunk in answer.chunks():
            received.append(chunk)
    answer.close()
    assert "larger than 100000 bytes" in cut.value.message
    assert sum(map(len, received)) <= 100_000


def test_stream_refuses_what_request_refuses(guarded_client, guard):
    with pytest.raises(OutboundRefusedError):
        guarded_client.stream("GET", "http://127.0.0.1:9/file", max_bytes=10)
