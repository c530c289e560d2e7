"""`fleetgate serve` closes connections that trickle their headers or go idle, and refuses a
body that does not arrive in time (408)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.procs import serve_process

CONFIG = {
    "models": [
        {"alias": "a", "deployments": [{"model": "m", "api_base": "http://127.0.0.1:9/v1"}]}
    ],
    "server": {"idle_timeout_s": 1.0, "body_timeout_s": 1.0},
    "tenancy": {"enabled": False},
}


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) is not None  # b"" (closed) or a response
    except TimeoutError:
        return False
    except ConnectionResetError:  # closed with our unread header lines still queued: a reset
        return True


def test_a_client_trickling_its_headers_is_cut_off(tmp_path: Path) -> None:
    with serve_process(CONFIG, tmp_path, master_key="k") as (url, _), _connect(url) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        closed = False
        for _ in range(20):  # a header line every half second, never the blank line
            try:
                sock.sendall(b"X-Slow: 1\r\n")
            except OSError:
                closed = True
                break
            if _closed_within(sock, 0.5):
                closed = True
                break
        assert closed
        assert time.monotonic() - started < 6


def test_an_idle_keep_alive_connection_is_closed(tmp_path: Path) -> None:
    with serve_process(CONFIG, tmp_path, master_key="k") as (url, _), _connect(url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200" in sock.recv(4096)
        assert _closed_within(sock, 4)


def test_a_body_that_does_not_arrive_is_408(tmp_path: Path) -> None:
    with serve_process(CONFIG, tmp_path, master_key="k") as (url, _), _connect(url) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
            b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":'
        )
        sock.settimeout(6)
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
