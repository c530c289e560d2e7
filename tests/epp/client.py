"""A small HTTP client for the end-to-end tests (the standard library's: no extra package)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["Reply", "abandon", "post", "stream"]


@dataclass
class Reply:
    status_code: int
    headers: dict[str, str]
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def _request(url: str, body: Any, key: str) -> urllib.request.Request:
    return urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )


def post(url: str, body: Any, key: str, timeout: float = 30.0) -> Reply:
    try:
        with urllib.request.urlopen(_request(url, body, key), timeout=timeout) as resp:
            headers = {k.lower(): v for k, v in resp.headers.items()}
            return Reply(resp.status, headers, resp.read().decode())
    except urllib.error.HTTPError as exc:
        headers = {k.lower(): v for k, v in exc.headers.items()}
        return Reply(exc.code, headers, exc.read().decode())


def stream(url: str, body: Any, key: str, timeout: float = 30.0) -> list[tuple[float, str]]:
    """The ``data:`` lines of an SSE answer, each with the time it arrived."""
    out: list[tuple[float, str]] = []
    with urllib.request.urlopen(_request(url, body, key), timeout=timeout) as resp:
        for _ in range(100_000):  # bounded: far more lines than any test's answer
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                out.append((time.perf_counter(), line[6:].decode().strip()))
    return out


def abandon(url: str, body: Any, key: str, after: int = 5) -> None:
    """Read ``after`` ``data:`` lines of an SSE answer, then close the socket mid-stream (a
    client that leaves)."""
    with urllib.request.urlopen(_request(url, body, key), timeout=30.0) as resp:
        seen = 0
        for _ in range(1000):  # bounded: far more lines than ``after``
            if resp.readline().startswith(b"data: "):
                seen += 1
                if seen == after:
                    break
        resp.fp.raw._sock.close()  # the client leaves mid-stream
