"""The load client of ``calls.py``: a separate process, so that its own work is not counted.

Reads commands from stdin, one per line (``json N`` or ``sse N``), sends N chat completions one
after another on one keep-alive connection, checks each answer and writes ``ok`` (or ``error
<what>``) on stdout. The gateway process that is measured starts it and waits on that line.

    python calls_client.py http://127.0.0.1:4000 sk-master
"""

from __future__ import annotations

import http.client
import sys
from urllib.parse import urlsplit

from wrkrun import request_body

CHAT_PATH = "/v1/chat/completions"


class Client:
    """One keep-alive connection sending the benchmark's chat request."""

    def __init__(self, base_url: str, api_key: str) -> None:
        parts = urlsplit(base_url)
        self._conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)
        self._headers = {"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"}
        self._bodies = {False: request_body(False), True: request_body(True)}

    def send(self, stream: bool) -> str | None:
        """One request; None when the answer is complete and well-formed, else what was wrong."""
        self._conn.request("POST", CHAT_PATH, self._bodies[stream], self._headers)
        response = self._conn.getresponse()
        body = response.read()
        if response.status != 200:
            return f"HTTP {response.status} {body[:200]!r}"
        expected = b"data: [DONE]" if stream else b'"choices"'
        return None if expected in body else f"no {expected!r} in {body[:200]!r}"


def main() -> None:
    base_url, api_key = sys.argv[1], sys.argv[2]
    client = Client(base_url, api_key)
    for line in sys.stdin:
        kind, count = line.split()
        problem = None
        for _ in range(int(count)):
            problem = client.send(kind == "sse")
            if problem is not None:
                break
        sys.stdout.write("ok\n" if problem is None else f"error {problem}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
