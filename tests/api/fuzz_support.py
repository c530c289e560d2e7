"""What the fuzz tests share: raw HTTP/1.1 requests (any bytes in the path, query and headers,
nothing normalised by a client library) and the check every answer must pass."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

import numpy as np
import orjson
from hypothesis import strategies as st

__all__ = [
    "Answer",
    "HashEmbedder",
    "RawRequest",
    "assert_answer",
    "authorization",
    "hostile_text",
    "hostile_value",
    "path_segment",
    "send",
]

REQUEST_TIMEOUT_S = 20.0  # a hang is a failure too


class HashEmbedder:
    """Stands in for the sentence model (loading it takes longer than the whole fuzz run):
    a unit vector per text, from its hash."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        rows = [
            np.frombuffer(hashlib.sha512(t.encode(errors="replace")).digest(), np.uint8)
            for t in texts
        ]
        vectors = np.asarray(rows, np.float32).reshape(len(texts), 64) - 127.5
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@dataclass
class RawRequest:
    method: str
    target: bytes  # path and query, already encoded as they go on the wire
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""

    def wire(self) -> bytes:
        lines = [self.method.encode() + b" " + self.target + b" HTTP/1.1", b"Host: 127.0.0.1"]
        lines += [k + b": " + v for k, v in self.headers]
        lines += [b"Content-Length: " + str(len(self.body)).encode(), b"Connection: close"]
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return bytes(out)


async def send(port: int, request: RawRequest) -> Answer:
    """Send one request on a fresh connection and read the whole answer (bounded in time)."""
    async with asyncio.timeout(REQUEST_TIMEOUT_S):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request.wire())
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    return Answer(int(status_line.split()[1]), headers, body)


def assert_answer(request: RawRequest, answer: Answer, *, anthropic: bool = False) -> None:
    """Never a 5xx; every 4xx an OpenAI error object (``message``, ``type``, ``param``,
    ``code``), or with ``anthropic`` an Anthropic one (``{"type": "error", "error": {"type",
    "message"}}``)."""
    shown = (
        f"{request.method} {request.target[:1000]!r} {request.body[:1000]!r}"
        f" -> {answer.status}: {answer.body[:300]!r}"
    )
    assert answer.status < 500, shown
    if answer.status < 400 or request.method == "HEAD":
        return
    assert answer.headers.get("content-type", "").startswith("application/json"), shown
    body = orjson.loads(answer.body)
    error = body["error"]
    fields = {"message", "type"} if anthropic else {"message", "type", "param", "code"}
    assert isinstance(error, dict) and fields <= set(error), shown
    assert not anthropic or body["type"] == "error", shown
    assert isinstance(error["message"], str) and isinstance(error["type"], str), shown


# Values that broke parsers before: huge and non-finite numbers, repeated names, empty,
# non-ASCII and very long.
HOSTILE_STRINGS = [
    "", " ", "0", "-1", "1", "100", "1e400", "-1e400", "1e300", "inf", "-inf", "nan", "NaN",
    "1.5", "9" * 400, "-" + "9" * 40, "true", "false", "null", "[]", "{}", "team,team",
    "team,alias,key,tag,deployment,version", ",,,", "team, ", "admin", "request", "x" * 5000,
    "x" * 250, "a\x00b", "tab\there",
    "é", "\u202e", "\U0001f600", "\x00", "..", "../..", "%00", "2024-01-01", "2024-13-45T99:99",
    "9999-12-31T23:59:59Z", "0001-01-01", "1970-01-01T00:00:00+14:00", "+inf", "0x10",
]  # fmt: skip

hostile_text = st.sampled_from(HOSTILE_STRINGS) | st.text(max_size=12)

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False), hostile_text,
    st.sampled_from([1e300, -1e300, 1e308, 1e10, 2**31, 2**63, -(2**63), 2**64]),
)  # fmt: skip
hostile_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=10,
)

# Path segments as they go on the wire: encoded oddities as they are, any text percent-encoded.
path_segment = st.sampled_from(
    ["..", ".", "%00", "%2e%2e", "%2F", "%ff%fe", "%C3%A9", "a" * 3000, "x%20y", "~", "-", "%"]
) | st.text(min_size=1, max_size=12).map(lambda s: quote(s, safe=""))

ODD_AUTHORIZATION = [
    b"Bearer", b"Bearer ", b"Basic YTpi", b"bearer sk-test-master", b"Bearer sk-\xff\xfe",
    b"Bearer \xc3\xa9t\xc3\xa9", b"Bearer " + b"k" * 4000, b"sk-test-master",
    b"Bearer sk-test-master extra",
]  # fmt: skip


@st.composite
def authorization(draw: st.DrawFn, keys: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """An ``Authorization`` header with one of ``keys`` (role -> key; the master key twice as
    often), none, or an odd one (no scheme, another scheme, bytes that are not UTF-8, huge)."""
    choice = draw(st.sampled_from([*keys, "master", "none", "odd"]))
    if choice == "none":
        return []
    if choice == "odd":
        return [(b"Authorization", draw(st.sampled_from(ODD_AUTHORIZATION)))]
    return [(b"Authorization", b"Bearer " + keys[choice].encode())]
