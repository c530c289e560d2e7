"""The guard: a pool is never reclaimed while it is the only capacity of an alias with traffic.

For every alias whose chain (the alias, then its fallbacks) contains the pool and that had a
request in the window, on any replica: some *other* deployment of that chain must be in
rotation (healthy, not asleep, not reclaimed). Fallbacks and the alias's other deployments
count; a pool that only an alias without traffic needs may go (its next request wakes it).

Example::

    reason = only_capacity(table, dep, reclaimed={"chat-b"}, had_traffic=lambda a: True)
    # "only capacity of alias 'chat', which had traffic in the window" or None
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from fleetgate.routing.deployment import Deployment
from fleetgate.routing.table import RouteTable

__all__ = ["only_capacity"]


def only_capacity(
    table: RouteTable,
    pool: Deployment,
    *,
    reclaimed: Collection[str],
    had_traffic: Callable[[str], bool],
) -> str | None:
    """Why ``pool`` must stay (the first alias that needs it), or None when it may go."""
    for alias in table.aliases():
        chain = [d for route in table.chain(alias) for d in route.deployments]
        if all(d.id != pool.id for d in chain) or not had_traffic(alias):
            continue
        others = [
            d for d in chain
            if d.id != pool.id and d.id not in reclaimed and not d.state.asleep
            and d.state.healthy()
        ]  # fmt: skip
        if not others:
            return f"only capacity of alias '{alias}', which had traffic in the window"
    return None
