"""The `DispatchHook` of a request carrying images: encoder-cache affinity and compute budget.

``prefer``: among the candidates, the replica that recently encoded the most of this request's
images (its engine-side encoder cache is warm), unless it is clearly busier than the least
loaded candidate. ``admit``: waits for the deployment's image-token budget (FIFO), held until
the upstream answers (for a stream: its first event, i.e. while the engine prefills the
images), and records the images as encoded on that deployment.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fleetgate.errors import RateLimited
from fleetgate.multimodal.images.affinity import ImageAffinity
from fleetgate.multimodal.images.budget import ImageBudget
from fleetgate.routing.deployment import Deployment

__all__ = ["ImageDispatchHook"]


class ImageDispatchHook:
    """Per request. ``budget`` None: no admission control (affinity only).

    Example::

        req.dispatch_hooks.append(
            ImageDispatchHook(keys, tokens, affinity=affinity, budget=budget, queue_timeout_s=60)
        )
    """

    # On an alias with an encoder pool the budget and affinity apply to the encoder engine.
    encoder_work = True

    def __init__(
        self,
        image_keys: Sequence[str],
        image_tokens: int,
        *,
        affinity: ImageAffinity | None,
        budget: ImageBudget | None,
        queue_timeout_s: float = 60.0,
        busy_slack: int = 4,
        owner: str = "",
    ) -> None:
        self.image_keys = list(image_keys)
        self.image_tokens = image_tokens
        self._affinity = affinity
        self._budget = budget
        self._timeout = queue_timeout_s
        self._slack = busy_slack
        self._owner = owner  # the API key: waiting requests of different keys take turns
        self.admitted_to: str | None = None

    def prefer(self, candidates: Sequence[Deployment]) -> Sequence[Deployment]:
        if self._affinity is None or len(candidates) < 2:
            return ()
        warm = self._affinity.preferred(self.image_keys, [d.id for d in candidates])
        if warm is None:
            return ()
        least = min(d.state.in_flight for d in candidates)
        return [d for d in candidates if d.id == warm and d.state.in_flight <= least + self._slack]

    def extra_body(self, dep: Deployment) -> Mapping[str, Any] | None:
        return None

    def admit(self, dep: Deployment) -> AbstractAsyncContextManager[None]:
        return self._admit(dep)

    @asynccontextmanager
    async def _admit(self, dep: Deployment) -> AsyncIterator[None]:
        if self._budget is None:
            yield
        else:
            async with self._enter_budget(dep) as _:
                yield
        self.admitted_to = dep.id
        if self._affinity is not None:
            self._affinity.record(self.image_keys, dep.id)

    def _enter_budget(self, dep: Deployment) -> AbstractAsyncContextManager[None]:
        assert self._budget is not None
        admit = self._budget.admit(dep.id, self.image_tokens, owner=self._owner)
        return _bounded(admit, self._timeout)


@asynccontextmanager
async def _bounded(
    inner: AbstractAsyncContextManager[None], timeout_s: float
) -> AsyncIterator[None]:
    try:
        async with asyncio.timeout(timeout_s):
            await inner.__aenter__()
    except TimeoutError as exc:
        raise RateLimited(
            "the image compute budget of this deployment is busy; retry shortly",
            retry_after=min(timeout_s, 5.0),
            code="image_budget_busy",
        ) from exc
    try:
        yield
    except BaseException as exc:
        await inner.__aexit__(type(exc), exc, exc.__traceback__)
        raise
    await inner.__aexit__(None, None, None)
