"""`ResponsesWire`: the request path's answer in the Responses API's shape.

``json`` turns a whole chat completion into a ``response`` object; ``stream`` gives a
`fleetgate.contract.request.StreamEncoder` writing the Responses streaming events::

    response.created, response.in_progress,
    per text item:     response.output_item.added, response.content_part.added,
                       response.output_text.delta*, response.output_text.done,
                       response.content_part.done, response.output_item.done
    per function call: response.output_item.added, response.function_call_arguments.delta*,
                       response.function_call_arguments.done, response.output_item.done
    then one of        response.completed | response.incomplete | response.failed

each with a ``sequence_number``. The stream's output is gathered in a `Turn` by the
recorder (``stage.ResponsesRecorder``, the outermost stream filter: it sees exactly what the
client is sent, after the output checks), which also stores the response before its last
event is written, so a client can continue from it as soon as it has read that event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from fleetgate.api.responses.output import (
    ResponseMeta,
    Turn,
    call_item,
    message_item,
    response_object,
    responses_usage,
    status_of,
    text_part,
    turn_from_chat,
)
from fleetgate.errors import FleetgateError
from fleetgate.sse import encode_sse

__all__ = ["ResponsesStream", "ResponsesWire", "SaveResponse"]

SaveResponse = Callable[[dict[str, Any], Turn], Awaitable[None]]
"""Stores a final response object and its turn (``store: true``)."""


class ResponsesWire:
    """`fleetgate.contract.request.ResponseWire` of ``/v1/responses``."""

    def __init__(self, meta: ResponseMeta, save: SaveResponse | None = None) -> None:
        self.meta = meta
        self.turn = Turn()
        self.recorded = False  # a recorder filter feeds `turn` (else the encoder does)
        self.final: dict[str, Any] | None = None  # the final response object, once known
        self._save = save
        self._saved = False

    def json(self, response: dict[str, Any]) -> bytes:
        self.turn = turn_from_chat(response)
        self.final = self._final(responses_usage(response.get("usage")))
        return orjson.dumps(self.final)

    def stream(self) -> ResponsesStream:
        return ResponsesStream(self)

    def _final(self, usage: dict[str, Any] | None) -> dict[str, Any]:
        status, reason = status_of(self.turn.finish_reason)
        output = self.turn.output(status)
        return response_object(
            self.meta, status=status, output=output, usage=usage, incomplete_reason=reason
        )

    def finalize(self, chat_usage: Any) -> dict[str, Any]:
        """The final response object (built once, from the turn and a chat ``usage``)."""
        if self.final is None:
            self.final = self._final(responses_usage(chat_usage))
        return self.final

    async def save(self, chat_usage: Any) -> None:
        """Finalize and store (once; nothing when ``store`` is off)."""
        final = self.finalize(chat_usage)
        if self._save is not None and not self._saved:
            self._saved = True
            await self._save(final, self.turn)


class ResponsesStream:
    """`fleetgate.contract.request.StreamEncoder` writing Responses events for one stream."""

    def __init__(self, wire: ResponsesWire) -> None:
        self.wire = wire
        self._seq = 0
        self._started = False
        self._items: list[str] = []  # announced item ids, in output order
        self._open: set[str] = set()  # announced and not yet done

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return encode_sse(kind, data)

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        head = response_object(self.wire.meta, status="in_progress", output=[])
        return self._event("response.created", response=head) + self._event(
            "response.in_progress", response=head
        )

    def chunk(self, chunk: dict[str, Any]) -> bytes:
        turn = self.wire.turn
        if not self.wire.recorded:
            turn.feed(chunk)
        out = [self._start()]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            text = delta.get("content")
            if isinstance(text, str) and text and turn.message_id is not None:
                out.append(self._text(turn.message_id, text))
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    out.append(self._call(turn, call))
        return b"".join(out)

    def _text(self, item_id: str, text: str) -> bytes:
        out = b""
        if item_id not in self._items:
            out = self._close_all()
            out += self._announce(item_id, None)
            out += self._event(
                "response.content_part.added", item_id=item_id, output_index=self._index(item_id),
                content_index=0, part=text_part(""),
            )  # fmt: skip
        return out + self._event(
            "response.output_text.delta", item_id=item_id, output_index=self._index(item_id),
            content_index=0, delta=text, logprobs=[],
        )  # fmt: skip

    def _call(self, turn: Turn, call: dict[str, Any]) -> bytes:
        index = call.get("index", 0)
        found = turn.calls.get(index if isinstance(index, int) else 0)
        if found is None:
            return b""
        out = b""
        if found.id not in self._items:
            out = self._close_all()
            head = call_item(found, "in_progress")
            head["arguments"] = ""
            out += self._announce(found.id, head)
        fn = call.get("function")
        piece = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(piece, str) and piece:
            out += self._event(
                "response.function_call_arguments.delta", item_id=found.id,
                output_index=self._index(found.id), delta=piece,
            )  # fmt: skip
        return out

    def _announce(self, item_id: str, item: dict[str, Any] | None) -> bytes:
        """``output_item.added``; ``item`` None: the message item, with no content yet."""
        if item is None:
            item = {**message_item(item_id, "", "in_progress"), "content": []}
        self._items.append(item_id)
        self._open.add(item_id)
        index = self._index(item_id)
        return self._event("response.output_item.added", output_index=index, item=item)

    def _index(self, item_id: str) -> int:
        return self._items.index(item_id)

    def _close_all(self, status: str = "completed") -> bytes:
        out = b""
        for item_id in [i for i in self._items if i in self._open]:
            out += self._close(item_id, status)
        return out

    def _close(self, item_id: str, status: str) -> bytes:
        self._open.discard(item_id)
        turn = self.wire.turn
        index = self._index(item_id)
        if item_id == turn.message_id:
            text = "".join(turn.text)
            return (
                self._event(
                    "response.output_text.done", item_id=item_id, output_index=index,
                    content_index=0, text=text, logprobs=[],
                )
                + self._event(
                    "response.content_part.done", item_id=item_id, output_index=index,
                    content_index=0, part=text_part(text),
                )
                + self._event(
                    "response.output_item.done", output_index=index,
                    item=message_item(item_id, text, status),
                )
            )  # fmt: skip
        call = next(c for c in turn.calls.values() if c.id == item_id)
        return self._event(
            "response.function_call_arguments.done", item_id=item_id, output_index=index,
            arguments=call.arguments,
        ) + self._event(
            "response.output_item.done", output_index=index, item=call_item(call, "completed")
        )  # fmt: skip

    def end(self, usage: dict[str, Any] | None) -> bytes:
        final = self.wire.finalize(usage.get("usage") if isinstance(usage, dict) else None)
        status = str(final["status"])
        out = self._start()
        for item_id in self.wire.turn.order:  # items the stream never announced (none so far)
            if item_id not in self._items:
                out += self._announce_late(item_id)
        out += self._close_all("incomplete" if status == "incomplete" else "completed")
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return out + self._event(kind, response=final)

    def _announce_late(self, item_id: str) -> bytes:
        turn = self.wire.turn
        if item_id == turn.message_id:
            return self._announce(item_id, None)
        call = next(c for c in turn.calls.values() if c.id == item_id)
        return self._announce(item_id, call_item(call, "in_progress"))

    def error(self, error: Any) -> bytes:
        """A failure after the stream began: ``response.failed`` with the error."""
        out = self._start()
        status = error.status if isinstance(error, FleetgateError) else 500
        message = error.to_dict()["error"]["message"] if isinstance(error, FleetgateError) else ""
        code = "rate_limit_exceeded" if status == 429 else "server_error"
        failed = response_object(
            self.wire.meta,
            status="failed",
            output=self.wire.turn.output("incomplete"),
            error={"code": code, "message": str(message or "The response failed.")},
        )
        return out + self._event("response.failed", response=failed)
