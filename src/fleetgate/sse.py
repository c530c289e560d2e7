"""Server-sent events: the one event parser, the encoder, and the byte-level framer.

- :class:`SSEParser` turns bytes into ``(event, data)`` pairs. It follows the WHATWG
  event-stream rules: lines end in CRLF, LF or CR (a CR at the end of one network chunk and an
  LF at the start of the next count as one line end), lines starting with ``:`` are comments,
  ``data`` lines of one event are joined with ``\\n``, one space after the colon is dropped, and
  an event is dispatched at a blank line only if it carried data. Bytes may be split anywhere,
  including inside a multi-byte UTF-8 character. Every reader of events uses it (the Anthropic
  provider, the benchmark client and scripts).
- :func:`encode_sse` writes one frame.
- :class:`SSEBatches` (and :func:`iter_sse_batches` over an iterator of reads) only cuts a
  byte stream into whole frames, never decoding them: it is the relay's fast path for
  OpenAI-style upstreams, whose frames go to the client as the bytes that came in.

Example::

    parser = SSEParser()
    for event, data in parser.feed(chunk):
        ...
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

__all__ = ["SSEBatches", "SSEParser", "encode_sse", "iter_sse_batches"]

_SEP = b"\n\n"


class SSEParser:
    """Incremental ``text/event-stream`` parser: feed bytes, get ``(event, data)`` pairs.

    ``event`` is the ``event:`` field of the event, or ``"message"`` when it had none; ``data``
    is the joined ``data:`` lines. Events still incomplete when the stream ends are dropped, as
    the specification requires, unless the reader asks for them with :meth:`end`.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # text after the last line end
        self._after_cr = False  # the previous chunk ended in CR: a leading LF is part of it
        self._first = True
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """Parse ``chunk`` and return the events it completed, in order."""
        text = self._decoder.decode(chunk)
        if self._first and text:
            self._first = False
            text = text.removeprefix("\ufeff")
        if self._after_cr and text:
            self._after_cr = False
            text = text.removeprefix("\n")
        buf = self._pending + text if self._pending else text
        if "\r" in buf:
            if buf.endswith("\r"):  # its LF, if any, comes at the start of the next chunk
                self._after_cr = True
                buf = buf[:-1].replace("\r\n", "\n").replace("\r", "\n") + "\n"
            else:
                buf = buf.replace("\r\n", "\n").replace("\r", "\n")
        lines = buf.split("\n")
        self._pending = lines.pop()  # text after the last line end
        events: list[tuple[str, str]] = []
        for line in lines:
            if line.startswith("data:"):  # most lines: handled here without a call
                self._data.append(line[6:] if line.startswith("data: ") else line[5:])
            else:
                self._line(line, events)
        return events

    def end(self) -> list[tuple[str, str]]:
        """At the end of the stream: the event left open, if it carried data.

        The specification drops such an event (and :meth:`feed` alone does); a reader that
        keeps what a server sent without the final line end, like the benchmark client, calls
        this once after the last :meth:`feed`.
        """
        events: list[tuple[str, str]] = []
        line = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        if line:
            self._line(line, events)
        self._line("", events)
        return events

    def _line(self, line: str, events: list[tuple[str, str]]) -> None:
        if not line:
            if self._data:
                events.append((self._event or "message", "\n".join(self._data)))
            self._event = ""
            self._data = []
            return
        if line.startswith(":"):
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        # "id" and "retry" are not used by any upstream we speak to.


def encode_sse(event: str | None, data: Any) -> bytes:
    """One SSE frame: ``event: NAME`` (when given) and ``data: JSON``, ending in a blank line."""
    payload = orjson.dumps(data)
    if event is None:
        return b"data: " + payload + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"


class SSEBatches:
    """The relay's framer: complete SSE events (each ending in a blank line) from ``read``,
    one list per read that completed any, never decoding them. ``read`` returns the bytes
    received so far (at least one byte) and ``b""`` at the end of the stream; a last event
    without its blank line is completed then. ``ended``: the stream was read to its end.
    ``errors`` translates what ``read`` raises (an ``Exception``; a cancellation passes).

    A class rather than an async generator: an event costs one resumed frame here instead of
    one per generator stacked above the connection (``__anext__`` calls ``read`` directly)."""

    __slots__ = ("_buf", "_errors", "_read", "ended")

    def __init__(
        self,
        read: Callable[[], Awaitable[bytes]],
        errors: Callable[[Exception], BaseException] | None = None,
    ) -> None:
        self._read = read
        self._errors = errors
        self._buf = b""
        self.ended = False

    def __aiter__(self) -> SSEBatches:
        return self

    async def __anext__(self) -> list[bytes]:
        buf = self._buf
        while not self.ended:
            try:
                chunk = await self._read()
            except Exception as exc:
                if self._errors is None:
                    raise
                raise self._errors(exc) from None
            if not chunk:
                self.ended = True
                break
            buf = buf + chunk if buf else chunk
            at = buf.find(_SEP)
            if at > 0 and at == len(buf) - 2:  # one whole event, as an engine sends a token
                self._buf = b""
                return [buf]
            if at < 0:
                if b"\r\n\r\n" in buf:
                    buf = buf.replace(b"\r\n", b"\n")
                else:
                    continue
            *events, buf = buf.split(_SEP)
            batch = [event + _SEP for event in events if event]
            if batch:
                self._buf = buf
                return batch
        self._buf = b""
        if buf.strip():
            return [buf.rstrip(b"\n") + _SEP]
        raise StopAsyncIteration


def iter_sse_batches(chunks: AsyncIterator[bytes]) -> AsyncIterator[list[bytes]]:
    """Split a byte stream into complete SSE events (each ending in a blank line), yielding
    the events completed by each read together (`SSEBatches` over an iterator of reads)."""

    async def read() -> bytes:
        async for chunk in chunks:
            if chunk:
                return chunk
        return b""

    return SSEBatches(read)
