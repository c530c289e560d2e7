"""Compute budget for image tokens: a per-request image cap and per-deployment admission.

Vision encoding competes with decoding on the same GPU. Each deployment gets a budget of image
tokens in flight; a request carrying images waits in a FIFO queue until its tokens fit, so a
five-image request waits its turn instead of stalling every stream. Requests without images
(``image_tokens == 0``) never wait. A single request larger than the whole budget is admitted
alone once the deployment is idle, so it cannot starve. Requests of different ``owner`` (API
key) take turns at the head of the queue, round-robin (`fleetgate.multimodal.fair.FairShare`):
one key's backlog of image requests never stands between another key and the budget.

`ImageBudget` is the interface the multimodal stage uses; `ImageComputeBudget` keeps the budget
in this process, `fleetgate.multimodal.images.shared_budget.SharedImageBudget` in Redis (shared
by every gateway process and replica).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.fair import FairShare

__all__ = ["ImageBudget", "ImageComputeBudget"]


class ImageBudget(Protocol):
    """Admission of image tokens per deployment (see the module docstring)."""

    max_images_per_request: int

    def check_request(self, image_count: int, *, param: str | None = "messages") -> None:
        """Refuse a request carrying more images than allowed (400)."""
        ...

    def in_flight(self, deployment_id: str) -> int:
        """Image tokens this process holds on ``deployment_id``."""
        ...

    def waiting(self, deployment_id: str) -> int:
        """Requests of this process queued for ``deployment_id``."""
        ...

    def admit(
        self, deployment_id: str, image_tokens: int, *, owner: str = ""
    ) -> AbstractAsyncContextManager[None]:
        """Hold ``image_tokens`` of ``deployment_id``'s budget for the body of the block;
        waiting requests of different ``owner`` take turns."""
        ...

    async def aclose(self) -> None:
        """Finish background work (called when the gateway stops)."""
        ...


@dataclass(slots=True)
class _Waiter:
    tokens: int
    future: asyncio.Future[None]


@dataclass(slots=True)
class _Lane:
    capacity: int
    in_flight: int = 0
    queue: deque[_Waiter] = field(default_factory=deque)
    # Which owner's request is next at the head of ``queue`` (one waits there at a time).
    turns: FairShare = field(default_factory=lambda: FairShare("image budget", capacity=1))


class ImageComputeBudget:
    """Admission control for image tokens per deployment.

    Example::

        budget = ImageComputeBudget(default_tokens_in_flight=8192, max_images_per_request=5)
        budget.check_request(len(images))
        async with budget.admit("qwen-vl-a", image_tokens):
            ...  # send the request upstream
    """

    def __init__(
        self,
        *,
        default_tokens_in_flight: int,
        max_images_per_request: int = 8,
        per_deployment: Mapping[str, int] | None = None,
    ) -> None:
        if default_tokens_in_flight <= 0:
            raise ValueError("default_tokens_in_flight must be positive")
        self.default_tokens_in_flight = default_tokens_in_flight
        self.max_images_per_request = max_images_per_request
        self._capacities = dict(per_deployment or {})
        self._lanes: dict[str, _Lane] = {}

    def check_request(self, image_count: int, *, param: str | None = "messages") -> None:
        """Refuse a request carrying more images than allowed (400)."""
        if image_count > self.max_images_per_request:
            raise InvalidRequest(
                f"request has {image_count} images; at most {self.max_images_per_request} allowed",
                param=param,
                code="too_many_images",
            )

    def in_flight(self, deployment_id: str) -> int:
        """Image tokens currently admitted on ``deployment_id``."""
        lane = self._lanes.get(deployment_id)
        return lane.in_flight if lane else 0

    def waiting(self, deployment_id: str) -> int:
        """Requests queued for ``deployment_id``."""
        lane = self._lanes.get(deployment_id)
        return len(lane.queue) + lane.turns.queued if lane else 0

    async def aclose(self) -> None:
        """Nothing to finish (the `ImageBudget` interface)."""

    def capacity(self, deployment_id: str) -> int:
        """The image tokens ``deployment_id`` admits at once."""
        return self._capacities.get(deployment_id, self.default_tokens_in_flight)

    def _lane(self, deployment_id: str) -> _Lane:
        lane = self._lanes.get(deployment_id)
        if lane is None:
            lane = self._lanes[deployment_id] = _Lane(self.capacity(deployment_id))
        return lane

    @asynccontextmanager
    async def admit(
        self, deployment_id: str, image_tokens: int, *, owner: str = ""
    ) -> AsyncIterator[None]:
        """Hold ``image_tokens`` of ``deployment_id``'s budget for the body of the block."""
        if image_tokens <= 0:
            yield
            return
        lane = self._lane(deployment_id)
        tokens = min(image_tokens, lane.capacity)
        async with lane.turns.turn(owner):  # owners take turns to wait at the head
            await self._acquire(lane, tokens)
        try:
            yield
        finally:
            lane.in_flight -= tokens
            self._wake(lane)

    async def _acquire(self, lane: _Lane, tokens: int) -> None:
        if not lane.queue and lane.in_flight + tokens <= lane.capacity:
            lane.in_flight += tokens
            return
        waiter = _Waiter(tokens, asyncio.get_running_loop().create_future())
        lane.queue.append(waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                # Admitted just as we were cancelled: give the tokens back.
                lane.in_flight -= tokens
            else:
                lane.queue.remove(waiter)
            self._wake(lane)
            raise

    def _wake(self, lane: _Lane) -> None:
        # Strict FIFO: only the head may go; later small requests do not overtake it.
        while lane.queue and lane.in_flight + lane.queue[0].tokens <= lane.capacity:
            waiter = lane.queue.popleft()
            lane.in_flight += waiter.tokens
            waiter.future.set_result(None)
