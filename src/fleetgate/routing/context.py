"""What a strategy sees of a request, and what it returns: the strategy interface.

The dispatcher wraps the request in a `RouteContext` for the routing of it, asks the alias's
`Strategy` to pick among the candidates, and sends to the `Pick`'s deployment with its extra
body fields (for example vLLM's ``cache_salt``). A strategy reads the request, never writes
it, and returns everything it decided.

Example::

    class FirstStrategy:
        name = "first"

        def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
            return Pick(candidates[0])
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from fleetgate.routing.deployment import Deployment
from fleetgate.routing.dispatch_hooks import DispatchHook
from fleetgate.tenancy.principal import Principal

__all__ = [
    "Pick",
    "RouteContext",
    "RoutedRequest",
    "Strategy",
    "Usage",
    "pass_gate",
    "refused",
    "until_refused",
]

_T = TypeVar("_T")


class Usage(Protocol):
    """What routing reads of a request's outcome (`fleetgate.hooks.Outcome` is one)."""

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def completion_tokens(self) -> int: ...


class RoutedRequest(Protocol):
    """What routing reads of a request (`fleetgate.hooks.GatewayRequest` is one)."""

    @property
    def alias(self) -> str: ...

    @property
    def principal(self) -> Principal: ...

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def body(self) -> dict[str, Any]:
        """The request body (OpenAI format); never changed by routing."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Selected request headers, lower-case names (affinity, ``x-session-id``, ...)."""
        ...

    @property
    def dispatch_hooks(self) -> Sequence[DispatchHook]:
        """Added by request stages: narrow the candidates and gate the send."""
        ...

    @property
    def outcome(self) -> Usage:
        """The tokens used, once the answer was relayed (settles what a fallback reserved)."""
        ...

    # A check still in flight that must pass before the upstream's answer is used (a
    # reservation overlapping the upstream call; see `fleetgate.hooks.GatewayRequest.gate`):
    # the dispatcher waits for it after the send and sets it to None.
    gate: asyncio.Future[None] | None


async def pass_gate(req: RoutedRequest) -> None:
    """Wait for ``req.gate`` and clear it; raises the gate's refusal. A cancellation of the
    wait (a preemption that requeues the request, the client leaving) leaves the gate on the
    request for whoever waits next, unharmed."""
    gate = req.gate
    if gate is None:
        return
    if not gate.done():
        await asyncio.shield(gate)
    req.gate = None
    gate.result()


def refused(gate: asyncio.Future[None] | None) -> bool:
    """Whether ``gate`` has closed with a refusal."""
    return gate is not None and gate.done() and not gate.cancelled() and bool(gate.exception())


async def until_refused(gate: asyncio.Future[None] | None, work: Awaitable[_T]) -> _T:
    """``await work``, stopped at once if ``gate`` (a check still in flight) closes with a
    refusal meanwhile: the task is cancelled where it waits (a send upstream, a stage's wait
    in the admission queue) and the refusal raised instead. The gate is left on the request
    (`pass_gate` clears it)."""
    if gate is None or gate.done():
        return await work
    task = asyncio.current_task()
    waiting, stopped = True, False

    def stop(done: asyncio.Future[None]) -> None:
        nonlocal stopped
        # Only while ``work`` is awaited: a callback run after it returned cancels nothing.
        if waiting and task is not None and not done.cancelled() and done.exception():
            stopped = True
            task.cancel()

    gate.add_done_callback(stop)
    try:
        return await work
    except asyncio.CancelledError:
        if stopped and task is not None and task.uncancel() == 0:
            error = gate.exception()
            assert error is not None
            raise error from None
        raise
    finally:
        waiting = False
        gate.remove_done_callback(stop)


@dataclass(slots=True)
class RouteContext:
    """The routing of one request: the request itself (read-only) and what a strategy's
    ``prepare`` learned about it for its ``pick``."""

    request: RoutedRequest
    prompt_ids: list[int] | None = None  # the prompt's token ids, when an engine told us
    # pd-disagg: what the prefill engine answered, for the decode engine (kv_transfer_params)
    kv_transfer: dict[str, Any] | None = None
    # encoder pools: what the encoder engines answered (ec_transfer_params by mm hash)
    ec_transfer: dict[str, Any] | None = None
    # fallback aliases the request was admitted into: alias -> the settle of that admission
    # (called once, with the tokens used there, None: unknown)
    fallbacks: dict[str, Callable[[int | None], None]] = field(default_factory=dict)


@dataclass(slots=True)
class Pick:
    """A strategy's decision for one attempt (read-only once returned)."""

    deployment: Deployment
    # Fields to add to the upstream body for this deployment (vLLM's ``cache_salt``).
    extra_body: Mapping[str, Any] | None = None
    # The prompt tokens the engine is expected to compute (not served from its prefix cache);
    # None: all of them.
    uncached_tokens: int | None = None


class Strategy(Protocol):
    """Picks one deployment per attempt. A strategy may also have
    ``async def prepare(self, candidates, ctx) -> None``, awaited once per alias before its
    picks (to fetch what ``pick`` needs into ``ctx``; see `KvAwareStrategy.prepare`)."""

    name: str

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
        """Choose one of ``candidates`` (never empty)."""
        ...
