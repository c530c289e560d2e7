"""The simulator's KV-cache event publisher, on vLLM's wire (``--kv-events-config``).

Like vLLM's ``ZmqEventPublisher``: a PUB socket sends ``(topic, seq as 8 bytes big-endian,
payload)`` per batch, the payload a msgpack ``EventBatch`` of msgspec structs encoded
``array_like`` with ``tag=True``::

    [ts, [["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
           medium, lora_name, extra_keys?], ["BlockRemoved", block_hashes, medium],
          ["AllBlocksCleared"]], data_parallel_rank]

(``extra_keys`` is sent only for a request's first block under a ``cache_salt``: ``[[salt],
None, ...]``, as vLLM appends the salt to that block's extra keys). A ROUTER socket answers a
replay request (8-byte start sequence) with each buffered ``(seq, payload)`` from it, then
``(-1, b"")``. Events of one event-loop turn (one scheduler step) form one batch, and
consecutive blocks of one request are merged into one ``BlockStored``, as vLLM does.

Example::

    publisher = KvEventPublisher("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558")
    await publisher.start()
    engine.kv.listener = publisher
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from fleetgate.tasks import cancel_and_wait

__all__ = ["KvEventPublisher"]

_MEDIUM = "GPU"
_END = (-1).to_bytes(8, "big", signed=True)


class KvEventPublisher:
    """Publishes the block manager's stored / removed / cleared blocks (see module docstring)."""

    def __init__(
        self,
        endpoint: str,
        replay_endpoint: str | None = None,
        *,
        topic: str = "",
        block_size: int = 16,
        buffer_steps: int = 10_000,
    ) -> None:
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.topic = topic.encode()
        self.block_size = block_size
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._pending: list[list[Any]] = []
        self._seq = 0
        self._ctx: Any = None
        self._pub: Any = None
        self._replay: Any = None
        self._replay_task: asyncio.Task[None] | None = None
        self._flush_scheduled = False
        self.drop_next = 0  # tests: batches to number but not send (a lossy network)

    async def start(self) -> None:
        """Bind both sockets. A ``*`` port (``tcp://127.0.0.1:*``) takes a free one from the
        system at bind time, with no window in which another process can take it first; the
        bound addresses are then in ``endpoint`` and ``replay_endpoint``. A failed bind closes
        what was opened and raises."""
        import zmq
        import zmq.asyncio

        self._ctx = zmq.asyncio.Context()
        try:
            self._pub = self._ctx.socket(zmq.PUB)
            self._pub.setsockopt(zmq.LINGER, 0)
            self._pub.setsockopt(zmq.SNDHWM, 100_000)
            self.endpoint = _bind(self._pub, self.endpoint)
            if self.replay_endpoint is not None:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.LINGER, 0)
                self.replay_endpoint = _bind(self._replay, self.replay_endpoint)
        except BaseException:
            await self.aclose()
            raise
        if self._replay is not None:
            self._replay_task = asyncio.get_running_loop().create_task(
                self._serve_replay(), name="fleetgate-sim-kv-replay"
            )

    async def aclose(self) -> None:
        await cancel_and_wait(self._replay_task)
        self._replay_task = None
        for sock in (self._pub, self._replay):
            if sock is not None:
                sock.close(linger=0)
        self._pub = self._replay = None
        if self._ctx is not None:
            self._ctx.destroy(linger=0)  # never waits on a socket left open
            self._ctx = None

    @property
    def next_seq(self) -> int:
        return self._seq

    # ---------------------------------------------------------------- the block manager's listener

    def stored(
        self, block_hash: int, parent: int | None, tokens: Sequence[int], salt: str | None
    ) -> None:
        h = block_hash
        last = self._pending[-1] if self._pending else None
        if (
            last is not None
            and last[0] == "BlockStored"
            and parent is not None
            and last[1][-1] == parent
        ):
            last[1].append(h)
            last[3].extend(tokens)
            if len(last) > 8:
                last[8].append(None)
        else:
            event: list[Any] = [
                "BlockStored", [h], parent,
                list(tokens), self.block_size, None, _MEDIUM, None,
            ]  # fmt: skip
            if parent is None and salt:
                event.append([[salt]])
            self._pending.append(event)
        self._schedule()

    def removed(self, block_hash: int) -> None:
        h = block_hash
        last = self._pending[-1] if self._pending else None
        if last is not None and last[0] == "BlockRemoved":
            last[1].append(h)
        else:
            self._pending.append(["BlockRemoved", [h], _MEDIUM])
        self._schedule()

    def cleared(self) -> None:
        self._pending.append(["AllBlocksCleared"])
        self._schedule()

    # ---------------------------------------------------------------- sending

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Send the pending events as one batch now."""
        import msgpack

        self._flush_scheduled = False
        if not self._pending:
            return
        payload = msgpack.packb([time.time(), self._pending, 0])
        self._pending = []
        seq = self._seq
        self._seq += 1
        self._buffer.append((seq, payload))
        if self.drop_next > 0:
            self.drop_next -= 1
            return
        if self._pub is not None:
            import zmq

            with contextlib.suppress(zmq.Again):
                self._pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload], zmq.NOBLOCK)

    async def _serve_replay(self) -> None:
        sock = self._replay
        while True:
            frames = await sock.recv_multipart()
            if len(frames) != 3:
                continue
            client, _, start_bytes = frames
            start = int.from_bytes(start_bytes, "big")
            for seq, payload in list(self._buffer):
                if seq >= start:
                    await sock.send_multipart([client, b"", seq.to_bytes(8, "big"), payload])
            await sock.send_multipart([client, b"", _END, b""])


def _bind(sock: Any, endpoint: str) -> str:
    """Bind ``sock`` and return the address it is bound to (the port a ``*`` resolved to)."""
    import zmq

    sock.bind(endpoint)
    bound = sock.getsockopt(zmq.LAST_ENDPOINT)
    return bound.decode() if isinstance(bound, bytes) else str(bound)
