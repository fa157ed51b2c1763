"""A real local HTTP receiver for tests: records every request, answers from a script of responses.
A request cut short (its body shorter than its Content-Length: the sender died while sending) is
not recorded, as a real server would not have received it."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # a burst of deliveries from a busy server is not dropped by the kernel (backlog 5)


class Receiver:
    """``Receiver().start()``; ``answers`` are used in order, then ``default`` for every request."""

    def __init__(self, default: Answer | None = None):
        self.default = default or Answer(200, {"ok": True})
        self.answers: list[Answer] = []
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *answers: Answer) -> "Receiver":
        with self._lock:
            self.answers = list(answers)
        return self

    def start(self) -> "Receiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # no ~40 ms delayed-ACK stall between headers and body
            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if len(body) < length:  # the sender died mid-request (a kill -9 test): nothing was received
                    self.close_connection = True
                    return
                with receiver._lock:
                    receiver.requests.append(Received(self.command, self.path, dict(self.headers), body, time.time()))
                    answer = receiver.answers.pop(0) if receiver.answers else receiver.default
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                payload = b"" if answer.body is None else (
                    answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode())
                try:
                    self.send_response(answer.status)
                    if answer.body is not None and not isinstance(answer.body, bytes):
                        self.send_header("Content-Type", "application/json")
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller gave up (a timeout test)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args):  # quiet
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        # Checked for a stop every 50 ms (the default half second made every test's teardown wait it).
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.01)
        raise AssertionError(f"receiver got {len(self.requests)} requests, expected {count}")
