"""`FairShare`: turns at a pool of worker processes, handed out fairly between API keys.

The speech-in, speech-out and image-decoding workers are a few processes per gateway process,
shared by every caller. Without a share, their queue is first come, first served: one key that
sends a hundred transcriptions at once makes every other key wait behind all hundred. Here each
key waits in a queue of its own, and a turn that comes free goes to the next key in
round-robin order, so another key waits for at most one turn of each busy key, never for the
whole backlog; a key may have at most ``max_waiting`` turns waiting (past it: 429). The pools
are per process, and so is the share.

Example::

    share = FairShare("transcription", capacity=2, max_waiting=4)
    async with share.turn(principal.key_id):
        ...  # use one worker
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fleetgate.errors import RateLimited

__all__ = ["FairShare"]


class FairShare:
    """``capacity`` turns at once, round-robin between owners; see the module docstring."""

    def __init__(self, name: str, *, capacity: int, max_waiting: int | None = None) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.name = name
        self.capacity = capacity
        self.max_waiting = max_waiting
        self._free = capacity
        # Owners with turns waiting, in the order they are next served.
        self._queues: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    def waiting(self, owner: str) -> int:
        """Turns ``owner`` is waiting for."""
        return len(self._queues.get(owner, ()))

    @property
    def queued(self) -> int:
        """Turns waited for, by every owner."""
        return sum(len(queue) for queue in self._queues.values())

    @property
    def busy(self) -> int:
        """Turns taken now."""
        return self.capacity - self._free

    @asynccontextmanager
    async def turn(self, owner: str) -> AsyncIterator[None]:
        """Hold one turn for the body of the block (429 when ``owner`` already waits for
        ``max_waiting``)."""
        await self._acquire(owner)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, owner: str) -> None:
        if self._free > 0 and not self._queues:
            self._free -= 1
            return
        queue = self._queues.get(owner)
        if self.max_waiting is not None and queue is not None and len(queue) >= self.max_waiting:
            raise RateLimited(
                f"this key already has {len(queue)} {self.name} requests waiting for a worker; "
                f"at most {self.max_waiting} may wait at once",
                code="worker_share_exceeded",
            )
        if queue is None:
            queue = self._queues[owner] = deque()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # handed a turn just as the caller left: pass it on
            elif future in queue:
                queue.remove(future)
                if not queue and self._queues.get(owner) is queue:
                    del self._queues[owner]
            raise

    def _release(self) -> None:
        self._free += 1
        while self._free > 0 and self._queues:
            owner, queue = next(iter(self._queues.items()))
            future = queue.popleft()
            if queue:
                self._queues.move_to_end(owner)  # its next turn comes after every other key's
            else:
                del self._queues[owner]
            if future.done():  # its caller left (cancelled) and has not run its cleanup yet
                continue
            self._free -= 1
            future.set_result(None)
