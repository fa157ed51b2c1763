"""Requests the HTTP server (waitress, under ``flask serve``) cannot parse are answered in the JSON
error shape with their status, and big bodies get a JSON 413 or 404, never a connection reset."""
from __future__ import annotations

import json
import socket

import pytest
import requests

MALFORMED = [
    (b"POST /v1/rpc HTTP/1.1\r\nHost: x\r\nX-Bad: a\x7fb\r\nContent-Length: 2\r\n\r\n{}", 400),
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400),
    (b"POST /webhooks/inbound/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header Name: 1\r\n\r\n", 400),
]


def raw_exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    return received


@pytest.mark.parametrize("request_bytes, status", MALFORMED)
def test_a_request_the_server_cannot_parse_gets_the_json_error_shape(server, request_bytes, status):
    answer = raw_exchange(server.port, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == str(status).encode(), answer[:300]
    assert b"Content-Type: application/json" in head
    error = json.loads(body)["error"]
    assert set(error) == {"code", "message"} and error["message"]


@pytest.mark.parametrize("path", ["/webhooks/inbound/unknown", "/webhooks/inbound/%00", "/nowhere"])
def test_a_5_mib_body_gets_a_json_answer_not_a_reset(server, path):
    response = requests.post(server.base_url + path, data=b"x" * (5 << 20),
                             headers={"Content-Type": "application/json"}, timeout=60)
    assert response.status_code in (404, 413)
    assert set(response.json()) == {"error"}


def test_a_body_past_the_servers_hard_limit_gets_a_json_413(server):
    response = requests.post(server.base_url + "/webhooks/inbound/unknown", data=b"x" * (17 << 20),
                             headers={"Content-Type": "application/json"}, timeout=60)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
