"""The part every messenger fake shares: a real threaded HTTP server on 127.0.0.1, a record of every
request, scripted failures and delays, and a client for the calls a messenger makes to Baton."""
from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import requests


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


@dataclass
class Reply:
    """One answer: a JSON-able ``body`` (or raw bytes), a status, extra headers, a wait before it."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class _Scripted:
    reply: Reply
    matches: Callable[[Recorded], bool]


class FakeServer:
    """Subclasses implement ``respond``; ``with Fake() as fake:`` or ``fake.start()`` / ``fake.stop()``."""

    label = "fake"
    api_prefix = ""                     # path the API base URL ends with ("/pa", "/v21.0")

    def __init__(self, port: int = 0):
        self.port = port
        self.requests: list[Recorded] = []
        self.delay_s = 0.0               # before every answer (a slow messenger)
        self.answer_late_s = 0.0         # after the call is taken, before its answer (a slow network back)
        self._scripted: list[_Scripted] = []
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self._local = threading.local()  # the connection of the request a handler thread answers
        self.gate = threading.Event()    # cleared: calls that send wait (``hold``) until it is set again
        self.gate.set()
        self.held = 0                    # calls that waited at the closed gate
        self.dropped = 0                 # of those, the ones whose caller was gone when it opened

    # --- lifecycle ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def api_url(self) -> str:
        """The base URL to configure (``BATON_<MESSENGER>_API_URL``)."""
        return self.url + self.api_prefix

    def start(self):
        self._stopping.clear()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler_for(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True, name=f"fake-{self.label}").start()
        return self

    def stop(self) -> None:
        """Stop listening and cut open keep-alive connections too, so a stopped fake is really gone."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- scripting ---------------------------------------------------------------------------------

    def script(self, reply: Reply, *, times: int = 1, path_endswith: str = "") -> None:
        """The next ``times`` requests whose path ends with ``path_endswith`` get ``reply`` instead of
        the protocol's answer (after it is recorded)."""
        with self._lock:
            self._scripted += [_Scripted(reply, lambda r, end=path_endswith: r.path.endswith(end))] * times

    def unscript(self) -> None:
        """Drop every scripted answer not used yet: the protocol's own answers again."""
        with self._lock:
            self._scripted.clear()

    def delay_next(self, seconds: float, *, times: int = 1, path_endswith: str = "") -> None:
        """The next ``times`` matching requests are answered normally, ``seconds`` late."""
        self.script(Reply(status=-1, delay_s=seconds), times=times, path_endswith=path_endswith)

    def hold(self) -> None:
        """From now on, calls that send a message wait before they are taken (as if the messenger
        were slow to read them), until ``release``."""
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def wait_at_gate(self) -> bool:
        """In a handler thread, before a call that sends is taken: wait while the gate is closed;
        False when the caller hung up meanwhile (killed): the messenger never took that request."""
        if self.gate.is_set():
            return True
        with self._lock:
            self.held += 1
        self.gate.wait()
        connection = getattr(self._local, "connection", None)
        if connection is not None and _hung_up(connection):
            with self._lock:
                self.dropped += 1
            return False
        return True

    def requests_to(self, path_endswith: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith(path_endswith)]

    def wait_for(self, path_endswith: str, count: int = 1, timeout: float = 10.0) -> list[Recorded]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.requests_to(path_endswith)
            if len(found) >= count:
                return found
            time.sleep(0.01)
        raise AssertionError(f"the {self.label} fake got {len(self.requests_to(path_endswith))} requests "
                             f"to ...{path_endswith}, expected {count}")

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    # --- one request -------------------------------------------------------------------------------

    def respond(self, request: Recorded) -> Reply:
        raise NotImplementedError

    def _answer(self, request: Recorded) -> Reply:
        with self._lock:
            self.requests.append(request)
            scripted = next((s for s in self._scripted if s.matches(request)), None)
            if scripted is not None:
                self._scripted.remove(scripted)
        self.sleep(self.delay_s)
        if scripted is not None:
            self.sleep(scripted.reply.delay_s)
            if scripted.reply.status != -1:
                return scripted.reply
        reply = self.respond(request)     # subclasses guard their own state with self._lock
        self.sleep(self.answer_late_s)
        return reply

    # --- calls the messenger makes to Baton ----------------------------------------------------------

    @staticmethod
    def post(url: str, body: bytes, headers: dict[str, str], timeout: float = 10.0) -> requests.Response:
        """POST ``body`` exactly as given (signatures cover these bytes)."""
        return requests.post(url, data=body, headers={"Content-Type": "application/json", **headers},
                             timeout=timeout)


def _hung_up(connection: socket.socket) -> bool:
    """Whether the other end closed the connection (a read would find its end)."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Limiter:
    """Token buckets by key, as a messenger limits its callers: ``rate`` calls per second, at most
    ``burst`` at once; a call may come ``tolerance`` of a token early (clocks and threads jitter)."""

    def __init__(self):
        self._buckets: dict[str, tuple[float, float]] = {}
        self.refused = 0

    def take(self, limits: list[tuple[str, float, float]], now: float, tolerance: float = 0.1) -> float | None:
        """Take one token of each ``(key, rate, burst)``; None when every bucket had one, else the
        seconds until they would (nothing taken)."""
        levels = {}
        wait = 0.0
        for key, rate, burst in limits:
            tokens, last = self._buckets.get(key, (burst, now))
            tokens = min(burst, tokens + (now - last) * rate)
            levels[key] = tokens
            if tokens < 1 - tolerance:
                wait = max(wait, (1 - tokens) / rate)
        if wait:
            self.refused += 1
            return wait
        for key, _rate, _burst in limits:
            self._buckets[key] = (levels[key] - 1, now)
        return None


def encode(value: Any) -> bytes:
    """The bytes a messenger would send: compact JSON, UTF-8."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _handler_for(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def setup(self) -> None:
            super().setup()
            with fake._lock:
                fake._connections.add(self.connection)

        def finish(self) -> None:
            with fake._lock:
                fake._connections.discard(self.connection)
            super().finish()

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            request = Recorded(self.command, parts.path, dict(parse_qsl(parts.query, keep_blank_values=True)),
                               dict(self.headers), body, time.time())
            fake._local.connection = self.connection
            reply = fake._answer(request)
            payload = reply.body if isinstance(reply.body, bytes) else (
                b"" if reply.body is None else encode(reply.body))
            try:
                self.send_response(reply.status)
                if reply.body is not None and not isinstance(reply.body, bytes):
                    self.send_header("Content-Type", "application/json")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass                      # the caller gave up (a timeout test)

        do_GET = do_POST = do_PUT = do_DELETE = _handle

        def log_message(self, *args: object) -> None:
            pass

    return Handler


class Recorder(FakeServer):
    """Stands in for Baton's inbound endpoints in protocol tests: records every call, answers ``answer``."""

    label = "recorder"

    def __init__(self, port: int = 0, answer: Reply | None = None):
        super().__init__(port)
        self.answer = answer or Reply(200, {"ok": True})

    def respond(self, request: Recorded) -> Reply:
        return self.answer
