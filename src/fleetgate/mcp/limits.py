"""The MCP gateway's own limits on a call, and where they are counted without tenancy.

`call_limits`: the `fleetgate.contract.tool.CallLimit` s of one call: ``mcp.key_rpm`` per key
(scope ``mcp-key:<key>``), ``mcp.team_rpm`` per team (``mcp-team:<team>``), and the server's
``rpm`` and ``max_parallel`` over every caller (``mcp-server:<server>``). The call carries
them down the request path, where the tenancy stage reserves them together with the key's,
team's and alias's limits and budgets, in one reservation (Redis when configured: exact across
replicas), and settles them after. Without tenancy there is no such stage: `LocalLimits`, put
first on a tool call's path, counts them in this process instead (it knows no budgets).
"""

from __future__ import annotations

from fleetgate.contract.principal import Principal
from fleetgate.contract.request import GatewayRequest, Outcome
from fleetgate.contract.tool import CallLimit
from fleetgate.errors import RateLimited
from fleetgate.limits.base import Denial, Limiter, Scope
from fleetgate.limits.memory import MemoryLimiter
from fleetgate.mcp.config import McpConfig, McpServerConfig
from fleetgate.tenancy.headers import duration
from fleetgate.tenancy.settles import Settles

__all__ = ["LocalLimits", "call_limits"]

_RESERVATION = "mcp.reservation"


def call_limits(
    config: McpConfig, principal: Principal, server: str, server_config: McpServerConfig
) -> tuple[CallLimit, ...]:
    """The MCP limits a call of ``principal`` to ``server`` counts against (module doc)."""
    found = [
        CallLimit(f"mcp-key:{principal.key_id}", rpm=config.key_rpm),
        CallLimit(
            f"mcp-server:{server}", rpm=server_config.rpm, max_parallel=server_config.max_parallel
        ),
    ]
    if principal.team_id:
        found.insert(1, CallLimit(f"mcp-team:{principal.team_id}", rpm=config.team_rpm))
    return tuple(c for c in found if c.rpm is not None or c.max_parallel is not None)


def _no_alerts(scopes: tuple[Scope, ...], totals: dict[str, int], cost: int) -> None:
    return None  # no budgets without tenancy


class LocalLimits:
    """A stage for tool calls when tenancy is off: their `CallLimit` s reserved before and
    settled after in this process, refused with the tenancy stage's 429."""

    name = "mcp-limits"

    def __init__(self, limiter: Limiter | None = None) -> None:
        self.limiter: Limiter = limiter or MemoryLimiter()
        self.settles = Settles(self.limiter, _no_alerts)

    async def before(self, req: GatewayRequest) -> None:
        call = req.tool
        scopes = tuple(
            Scope(c.scope, c.rpm, None, c.max_parallel) for c in (call.limits if call else ())
        )
        if not scopes:
            return
        result = await self.limiter.reserve(req.request_id, scopes, 0)
        if isinstance(result, Denial):
            raise _refusal(result)
        req.state[_RESERVATION] = result

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        reservation = req.state.pop(_RESERVATION, None)
        if reservation is not None:
            self.settles.submit(reservation, 0, 0)

    async def drain(self) -> None:
        """Finish the settles still running (shutdown)."""
        await self.settles.drain()


def _refusal(denial: Denial) -> RateLimited:
    """The tenancy stage's refusal for a rate or parallel limit (its wording and headers)."""
    headers = {f"x-ratelimit-reset-{denial.reason}": duration(denial.retry_after_ms)}
    if denial.reason == "requests":
        headers["x-ratelimit-remaining-requests"] = "0"
    return RateLimited(
        f"Rate limit reached for {denial.scope.split(':')[0]} ({denial.reason}); "
        f"retry in {duration(denial.retry_after_ms)}.",
        retry_after=denial.retry_after_ms / 1000,
        headers=headers,
    )
