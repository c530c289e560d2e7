"""Read what the engine answered as Envoy streams it past: usage, chunks, the end.

With response bodies sent to the picker (``STREAMED``), every chunk of the answer passes
here on its way to the client. `ResponseMeter` takes the usage from it (the last event of a
stream, which the picker asked the engine for when the client did not: it is then taken out
before it reaches the client, as fleetgate's relay does), counts the chunks relayed (what an
abandoned stream is billed by) and notes the first token's time. A chunk is changed only when
it carried the injected usage event, or ended inside an event while that event is held back.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from fleetgate.contract.request import Outcome

__all__ = ["ResponseMeter"]

MAX_JSON_BODY = 8 * 1024 * 1024  # a JSON answer kept for its usage at most; past it, estimated
_MAX_HELD = 1024 * 1024  # an SSE event still unfinished; a longer one is let through unread
_USAGE_NULL = (b'"usage":null', b'"usage": null')
_USAGE_NULL_END = b'"usage":null}\n\n'  # a token event's end when its stream asked for usage
_NULL_TAIL = len(_USAGE_NULL_END)


class ResponseMeter:
    """One response's body. ``strip_usage``: the usage event was injected by the picker (the
    client did not ask for it) and is taken out of the stream."""

    __slots__ = ("_held", "_json", "_out", "_strip", "stream", "saw_usage")

    def __init__(self, outcome: Outcome, *, stream: bool, strip_usage: bool) -> None:
        self._out = outcome
        self.stream = stream
        self._strip = stream and strip_usage
        self._held = b""
        self._json: list[bytes] = []
        self.saw_usage = False

    def feed(self, chunk: bytes, end: bool) -> bytes | None:
        """Read ``chunk``; returns what the client gets instead of it, or None: unchanged."""
        if not self.stream:
            self._keep_json(chunk, end)
            return None
        if not self._held and self._plain(chunk):  # the common chunk: token events only
            return None
        if not self._strip:
            self._events(chunk, end)
            return None
        data = self._held + chunk if self._held else chunk
        cut = data.rfind(b"\n\n") + 2 if not end else len(data)
        if cut <= 1:  # no event finished in it
            if len(data) > _MAX_HELD:
                self._held = b""
                return data
            self._held = data
            return b"" if chunk else None
        complete, self._held = data[:cut], data[cut:]
        kept = self._events(complete, end, strip=True)
        if kept is complete and complete is chunk:
            return None
        return kept

    def _plain(self, chunk: bytes) -> bool:
        """Count ``chunk`` when it is whole JSON ``data:`` events and nothing else, with no
        usage but a trailing ``"usage":null`` (which a stream that asked for its usage has in
        every token event), as `_events` would, in two or three scans of the chunk instead of
        a step per event; False: it is not, `_events` reads it. Each check only lets through
        what `_events` would count: an event ending in ``}`` is never ``[DONE]``."""
        if not (chunk.startswith(b"data:") and chunk.endswith(b"}\n\n")):
            return False
        size = len(chunk)
        if chunk.find(b"\n\n") == size - 2:  # one event (an engine's write per token)
            at = chunk.find(b'"usage"')
            if at >= 0 and (at != size - _NULL_TAIL or not chunk.endswith(_USAGE_NULL_END)):
                return False
            events = 1
        else:  # several: every boundary is ``}`` then the next event's ``data:``
            events = chunk.count(b"\n\n")
            if chunk.count(b"}\n\ndata:") != events - 1:
                return False
            if chunk.count(b'"usage"') != chunk.count(b'"usage":null'):
                return False
        out = self._out
        out.count_relayed(events)
        now = time.perf_counter()
        if out.first_token_at is None:
            out.first_token_at = now
        out.last_token_at = now
        return True

    def _events(self, data: bytes, end: bool, *, strip: bool = False) -> bytes:
        """Read the events in ``data``; with ``strip``, ``data`` less the usage-only event."""
        out = self._out
        kept: list[bytes] | None = None
        start = 0
        size = len(data)
        while start < size:  # one step per event: bounded by the chunk's length
            stop = data.find(b"\n\n", start)
            stop = size if stop < 0 else stop + 2
            event = data[start:stop]
            usage_only = self._read(event, out)
            if strip and usage_only:
                if kept is None:
                    kept = [data[:start]]
            elif kept is not None:
                kept.append(event)
            start = stop
        return data if kept is None else b"".join(kept)

    def _read(self, event: bytes, out: Outcome) -> bool:
        """Note one event; True when it is the usage-only event (no choices)."""
        body = event.strip()
        if not body.startswith(b"data:") or body.endswith(b"[DONE]"):
            return False
        if b'"usage"' in body and not any(u in body for u in _USAGE_NULL):
            data = _json(body[5:])
            if data is not None:
                out.take_usage(data.get("usage"))
                self.saw_usage = True
                choices = data.get("choices")
                if not choices:
                    return True
        out.count_relayed()
        now = time.perf_counter()
        if out.first_token_at is None:
            out.first_token_at = now
        out.last_token_at = now
        return False

    def _keep_json(self, chunk: bytes, end: bool) -> None:
        if chunk and sum(map(len, self._json)) + len(chunk) <= MAX_JSON_BODY:
            self._json.append(chunk)
        if not end:
            return
        data = _json(b"".join(self._json))
        self._json = []
        if data is None:
            return
        self._out.take_usage(data.get("usage"))
        self.saw_usage = isinstance(data.get("usage"), dict)
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            self._out.finish_reason = choices[0].get("finish_reason")
        rid = data.get("id")
        self._out.response_id = rid if isinstance(rid, str) else None


def _json(raw: bytes) -> dict[str, Any] | None:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None
