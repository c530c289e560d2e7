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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fleetgate.contract.dispatch import DispatchHook
from fleetgate.contract.principal import Principal
from fleetgate.routing.deployment import Deployment

__all__ = [
    "Pick",
    "RouteContext",
    "RoutedRequest",
    "Strategy",
    "Usage",
]


class Usage(Protocol):
    """What routing reads of a request's outcome (`fleetgate.contract.request.Outcome` is one)."""

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def completion_tokens(self) -> int: ...


class RoutedRequest(Protocol):
    """What routing reads of a request (`fleetgate.contract.request.GatewayRequest` is one)."""

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
    def dispatch_hooks(self) -> Sequence[DispatchHook[Deployment]]:
        """Added by request stages: narrow the candidates and gate the send."""
        ...

    @property
    def outcome(self) -> Usage:
        """The tokens used, once the answer was relayed (settles what a fallback reserved)."""
        ...

    # A check still in flight that must pass before the upstream's answer is used (a
    # reservation overlapping the upstream call; see `fleetgate.contract.flow`): the
    # dispatcher waits for it after the send (`fleetgate.contract.flow.pass_gate`).
    gate: asyncio.Future[None] | None


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
