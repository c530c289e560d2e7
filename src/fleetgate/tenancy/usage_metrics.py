"""Spend and requests per team and alias as Prometheus counters (the business dashboard).

The spend tables stay the record (``/admin/spend``, exact to the nano-dollar); these counters
are for rates and shares in Grafana: USD as floats, one increment per request that reached a
deployment, labelled with the team's name (empty for keys without a team).
"""

from __future__ import annotations

from fleetgate.telemetry.registry import Registry
from fleetgate.tenancy.cache import KeyCache

__all__ = ["SpendMetrics"]


class SpendMetrics:
    def __init__(self, registry: Registry, cache: KeyCache) -> None:
        self._cache = cache
        self._spend = registry.counter(
            "fleetgate_spend_usd_total",
            "Spend in USD of requests that reached a deployment, by team and alias.",
            ("team", "alias"),
        )
        self._requests = registry.counter(
            "fleetgate_team_requests_total",
            "Requests that reached a deployment, by team and alias.",
            ("team", "alias"),
        )

    def record(self, team_id: str | None, alias: str, cost_nusd: int) -> None:
        team = self._cache.team(team_id) if team_id else None
        labels = (team.name if team is not None else "", alias)
        self._requests.labels(*labels).inc()
        if cost_nusd:
            self._spend.labels(*labels).inc(cost_nusd / 1e9)
