"""Region preference: a gateway serves from its own region while it can, then fails over.

Each gateway replica knows its region (``router.region``); each deployment may name the region
it runs in (``region:``). For every attempt the dispatcher narrows the healthy candidates to the
best-ranked region that has one: the gateway's own region (deployments without a region count
as local), then ``router.region_failover`` in order, then every other region together. A region
whose deployments are all cooling down (connection refused cools one down at once) therefore
stops getting new requests at the next attempt, and a request whose attempt failed there before
its first byte is retried in the next region; when the probes bring the local deployments back,
traffic returns to them.

Example::

    prefs = RegionPreference("eu-west", ("eu-central", "us-east"))
    prefs.narrow(healthy)  # the eu-west ones if any, else eu-central, else us-east, else the rest
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetgate.routing.deployment import Deployment

__all__ = ["RegionPreference"]


class RegionPreference:
    """Ranks deployments by region for one gateway (``local``: its own region)."""

    __slots__ = ("_rank", "local", "order")

    def __init__(self, local: str | None, order: Sequence[str] = ()) -> None:
        self.local = local
        self.order = tuple(order)
        self._rank = {region: i + 1 for i, region in enumerate(self.order) if region != local}

    @property
    def active(self) -> bool:
        return self.local is not None

    def rank(self, dep: Deployment) -> int:
        """0 for the local region (or none named), then the failover order, then the rest."""
        region = dep.config.region
        if region is None or region == self.local:
            return 0
        return self._rank.get(region, len(self.order) + 1)

    def narrow(self, pool: Sequence[Deployment]) -> list[Deployment]:
        """The deployments of ``pool`` in its best-ranked region (all of ``pool`` when off)."""
        if self.local is None or not pool:
            return list(pool)
        ranks = [self.rank(d) for d in pool]
        best = min(ranks)
        return [d for d, r in zip(pool, ranks, strict=True) if r == best]
