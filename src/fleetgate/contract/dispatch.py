"""Per-request hooks into replica choice and sending, added by request stages.

A stage that knows something about the request that routing cannot see (the images it
carries, say) appends a `DispatchHook` to ``GatewayRequest.dispatch_hooks``; the dispatcher
then, for every attempt, narrows the candidates with ``prefer`` before the strategy picks, adds
``extra_body(dep)`` to the upstream body for the deployment picked (vLLM's ``priority``), and
holds ``admit(dep)`` around the upstream call to it (for a stream: until its first event).
Requests without hooks pay nothing. A hook whose work belongs to the vision encoder (the image
compute budget, image affinity) says so with ``encoder_work = True``: on an alias with an
encoder pool it applies to the encoder engine, not again to the language model
(`fleetgate.routing.encoder`).

Example::

    class OnlyB:
        def prefer(self, candidates):
            return [d for d in candidates if d.id == "b"]

        def extra_body(self, dep):
            return None

        def admit(self, dep):
            return contextlib.nullcontext()
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

__all__ = ["DispatchHook", "admitted", "extra_fields", "preferred"]

# The replica type the dispatcher picks among (`fleetgate.routing.deployment.Deployment`);
# the contract names no routing class, so a hook is generic in it.
D = TypeVar("D")


class DispatchHook(Protocol[D]):
    def prefer(self, candidates: Sequence[D]) -> Sequence[D]:
        """A non-empty subset to pick from, or an empty sequence for no preference."""
        ...

    def extra_body(self, dep: D) -> Mapping[str, Any] | None:
        """Fields to add to the upstream body when ``dep`` is picked (None: nothing)."""
        ...

    def admit(self, dep: D) -> AbstractAsyncContextManager[None]:
        """Held around the upstream call to ``dep`` (may wait, e.g. for a compute budget)."""
        ...


def preferred(hooks: Sequence[DispatchHook[D]], candidates: list[D]) -> list[D]:
    """``candidates`` narrowed by each hook's preference (ignored when it empties the list)."""
    for hook in hooks:
        narrowed = [d for d in hook.prefer(candidates) if d in candidates]
        if narrowed:
            candidates = narrowed
    return candidates


def extra_fields(hooks: Sequence[DispatchHook[D]], dep: D) -> dict[str, Any]:
    """Every hook's extra body fields for ``dep`` (a later hook's win)."""
    out: dict[str, Any] = {}
    for hook in hooks:
        fields = hook.extra_body(dep)
        if fields:
            out.update(fields)
    return out


@contextlib.asynccontextmanager
async def _all(hooks: Sequence[DispatchHook[D]], dep: D) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for hook in hooks:
            await stack.enter_async_context(hook.admit(dep))
        yield


class _NoAdmission:
    """No hook to admit the request: nothing to enter or leave (what most requests get; two
    calls where ``contextlib.nullcontext()`` makes three). Holds nothing: one serves all."""

    __slots__ = ()

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_ADMISSION = _NoAdmission()


def admitted(hooks: Sequence[DispatchHook[D]], dep: D) -> AbstractAsyncContextManager[object]:
    """Every hook's admission for ``dep``, entered in order and left in reverse."""
    if not hooks:
        return _NO_ADMISSION
    return _all(hooks, dep)
