"""One attempt's upstream call: within the request hooks' admission, stopped by a refused gate.

`fleetgate.routing.dispatch.Dispatcher` sends each attempt through `send_admitted`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fleetgate.contract.dispatch import admitted
from fleetgate.contract.flow import refused, until_refused
from fleetgate.providers.base import UpstreamCall, UpstreamResponse
from fleetgate.providers.engine_fields import sealed
from fleetgate.routing.context import Pick, RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.walk import Hop

__all__ = ["send_admitted"]

CallBuilder = Callable[[Pick], UpstreamCall]


def _send_gated(
    dep: Deployment, call: UpstreamCall, gate: asyncio.Future[None] | None
) -> Awaitable[UpstreamResponse]:
    """``dep.provider.send(call)``, stopped at once if ``gate`` (a reservation still in
    flight) closes with a refusal meanwhile: the upstream call is aborted (for a request that
    is not streamed, before the engine has generated the whole answer) and the refusal raised.
    A gate refused already (while the request waited for a wake, a retry's backoff or a
    fallback) sends nothing: the refusal is raised at once.
    """
    if gate is None:  # most requests: the provider's send itself, no coroutine between
        return dep.provider.send(call)
    if refused(gate):
        gate.result()  # raises the refusal
    return until_refused(gate, dep.provider.send(call))


async def send_admitted(
    pick: Pick, hop: Hop, build: CallBuilder, ctx: RouteContext
) -> UpstreamResponse:
    """``pick``'s call sent within the request hooks' admission for its deployment."""
    dep = pick.deployment
    async with admitted(hop.hooks, dep):
        # the engine's own fields as the gateway set them, never as the client did
        call = sealed(build(pick), pick.extra_body)
        return await _send_gated(dep, call, ctx.request.gate)
