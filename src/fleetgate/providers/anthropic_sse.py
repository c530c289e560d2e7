"""Server-sent events: an incremental parser and an encoder.

The parser follows the WHATWG event-stream rules: lines end in CRLF, LF or CR (a CR at the end
of one network chunk and an LF at the start of the next count as one line end), lines starting
with ``:`` are comments, ``data`` lines of one event are joined with ``\\n``, one space after the
colon is dropped, and an event is dispatched at a blank line only if it carried data. Bytes may
be split anywhere, including inside a multi-byte UTF-8 character.

Example::

    parser = SSEParser()
    for event, data in parser.feed(chunk):
        ...
"""

from __future__ import annotations

import codecs
from typing import Any

import orjson

__all__ = ["SSEParser", "encode_sse"]


class SSEParser:
    """Incremental ``text/event-stream`` parser: feed bytes, get ``(event, data)`` pairs.

    ``event`` is the ``event:`` field of the event, or ``"message"`` when it had none; ``data``
    is the joined ``data:`` lines. Events still incomplete when the stream ends are dropped, as
    the specification requires.
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
        events: list[tuple[str, str]] = []
        buf = self._pending + text
        start = 0
        length = len(buf)
        while True:
            cr = buf.find("\r", start)
            lf = buf.find("\n", start)
            if cr < 0 and lf < 0:
                break
            if cr < 0 or (0 <= lf < cr):
                end, nxt = lf, lf + 1
            elif cr + 1 < length:
                end, nxt = cr, cr + 2 if buf[cr + 1] == "\n" else cr + 1
            else:  # CR as the last character: its LF may come in the next chunk
                end, nxt = cr, cr + 1
                self._after_cr = True
            self._line(buf[start:end], events)
            start = nxt
        self._pending = buf[start:]
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
