"""A real local server that speaks OpenAI's chat-completions protocol, for tests and benchmarks.

``POST /v1/chat/completions`` (not streaming) and ``GET /v1/models``, with OpenAI's JSON shapes for
answers and errors. Its default "brain" is deterministic: a last user message containing "slow"
waits ``slow_seconds`` first; one containing "person" or "human" gets "Let me find a colleague for
you." and a ``handoff_to_operator`` tool call (when the request offers that tool); anything else gets
``"AI #<n>: <last user message>"``, n counting the answers given so far. Replace ``brain`` with a
callable ``(body) -> {"content", "handoff", "reason"}`` to script other answers (raising gives 500);
its optional "tool_name" and "arguments" (a raw string) change the tool call it makes.

Like OpenAI's, the 401 error text quotes the API key that was sent (in full here, so that a test
can catch a caller that repeats the server's text).

    with FakeOpenAI() as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="x")

    python tests/fake_openai.py --port 8089 [--delay 0.5] [--api-key KEY]   # serves until killed
"""
from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANDOFF_TOOL = "handoff_to_operator"
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
                404: "invalid_request_error", 429: "requests"}
_ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: a burst of parallel calls (several AI turns at
    # once) on a loaded machine, whose accept thread is slow to run, had SYNs dropped, and the
    # client sends one again only after 1 s, past a 1 s timeout.
    request_queue_size = 64


class FakeOpenAI:
    """``FakeOpenAI().start()`` or ``with FakeOpenAI() as fake:``; every method is thread-safe."""

    def __init__(self, api_key: str | None = None, *, port: int = 0):
        self.api_key = api_key
        self.port = port
        self.requests: list[dict[str, Any]] = []
        self.delay = 0.0                 # seconds before every answer (the "slow model")
        self.slow_seconds = 2.0          # the default brain's wait on a message containing "slow"
        self.refuse_tools = False        # 400 to a request that carries "tools"
        self.brain: Callable[[dict[str, Any]], dict[str, Any]] = self.default_brain
        self._failures: list[tuple[int, float | None]] = []
        self._hangs: list[float] = []
        self._answers = itertools.count(1)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    # --- control ----------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def fail_next(self, status: int, times: int = 1, *, retry_after: float | None = None) -> None:
        """The next ``times`` chat requests get HTTP ``status`` with an OpenAI error body (and a
        ``Retry-After`` header of ``retry_after`` seconds when given)."""
        with self._lock:
            self._failures += [(status, retry_after)] * times

    def hang_next(self, seconds: float, times: int = 1) -> None:
        """The next ``times`` chat requests wait ``seconds`` before answering normally."""
        with self._lock:
            self._hangs += [seconds] * times

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= n:
                    return list(self.requests)
            time.sleep(0.01)
        raise AssertionError(f"the fake OpenAI server got {len(self.requests)} requests, expected {n}")

    def default_brain(self, body: dict[str, Any]) -> dict[str, Any]:
        last = last_user_text(body)
        if "slow" in last:
            self.sleep(self.slow_seconds)
        n = next(self._answers)          # counts handoffs too; taken after the wait, when it completes
        if "person" in last or "human" in last:
            return {"content": "Let me find a colleague for you.", "handoff": True,
                    "reason": "customer asked for a person"}
        return {"content": f"AI #{n}: {last}", "handoff": False, "reason": None}

    def sleep(self, seconds: float) -> None:
        """Waits ``seconds``, or less when the server stops."""
        if seconds > 0:
            self._stopping.wait(seconds)

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", self.port), _handler_for(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False     # keep-alive handlers end when their client closes
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True, name="fake-openai").start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- one request ------------------------------------------------------------------------------

    def respond(self, body: dict[str, Any], authorization: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status, JSON, extra headers) for one chat-completions request."""
        with self._lock:
            self.requests.append(body)
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            sent = (authorization or "").removeprefix("Bearer ")
            return 401, error_body(401, f"Incorrect API key provided: {sent}."), {}
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
            hang = self._hangs.pop(0) if self._hangs else 0.0
        if failure is not None:
            status, retry_after = failure
            headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
            return status, error_body(status, f"The fake server was told to fail with HTTP {status}."), headers
        self.sleep(hang + self.delay)
        if self.refuse_tools and "tools" in body:
            return 400, error_body(400, "This model does not support tools.", param="tools"), {}
        if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list):
            return 400, error_body(400, "You must provide a model parameter and a list of messages."), {}
        try:
            said = self.brain(body)
        except Exception as exc:  # noqa: BLE001 - a failing brain is a server error, as documented
            return 500, error_body(500, f"The fake brain failed: {type(exc).__name__}."), {}
        return 200, completion_body(body, said), {}


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def offers_handoff(body: dict[str, Any]) -> bool:
    return any((tool.get("function") or {}).get("name") == HANDOFF_TOOL
               for tool in body.get("tools") or [] if isinstance(tool, dict))


def completion_body(body: dict[str, Any], said: dict[str, Any]) -> dict[str, Any]:
    content = said.get("content")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    calling = bool(said.get("handoff")) and offers_handoff(body)   # no tools offered: it cannot call
    if calling:
        reason = {"reason": said["reason"]} if said.get("reason") is not None else {}
        function = {"name": said.get("tool_name", HANDOFF_TOOL), "arguments": said.get("arguments", json.dumps(reason))}
        message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}]
    prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in body["messages"] if isinstance(m, dict))
    completion_tokens = len((content or "").split())
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if calling else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def error_body(status: int, message: str, *, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _ERROR_TYPES.get(status, "server_error"),
                      "param": param, "code": _ERROR_CODES.get(status)}}


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"     # keep-alive, as the openai client expects
        # Headers and body go out in two writes: with Nagle on, the body waits for the client's
        # delayed ACK (~40 ms per answer). A real server does not add that.
        disable_nagle_algorithm = True
        timeout = 60                      # an idle keep-alive connection is closed after this

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
                return self._send(404, error_body(404, f"Unknown path {self.path}."))
            try:
                body = json.loads(raw)
            except ValueError:
                return self._send(400, error_body(400, "The body is not valid JSON."))
            if not isinstance(body, dict):
                return self._send(400, error_body(400, "The body must be a JSON object."))
            self._send(*fake.respond(body, self.headers.get("Authorization")))

        def do_GET(self) -> None:
            if self.path.split("?")[0].rstrip("/") != "/v1/models":
                return self._send(404, error_body(404, f"Unknown path {self.path}."))
            self._send(200, {"object": "list", "data": [
                {"id": "fake-model", "object": "model", "created": 0, "owned_by": "baton-tests"}]})

        def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True     # the client gave up (a timeout test)

        def log_message(self, *args: object) -> None:  # quiet
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="A fake OpenAI chat-completions server.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before every answer")
    parser.add_argument("--api-key", default=None, help="require this key (401 without it)")
    args = parser.parse_args()
    fake = FakeOpenAI(args.api_key, port=args.port)
    fake.delay = args.delay
    fake.start()
    print(fake.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
