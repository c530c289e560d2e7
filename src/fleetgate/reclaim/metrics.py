"""The reclaim feature's Prometheus metrics (``fleetgate_reclaim_*``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fleetgate.telemetry.registry import Registry

__all__ = ["ReclaimMetrics"]

Samples = Callable[[], Iterable[tuple[tuple[str, ...], float]]]


class ReclaimMetrics:
    """One per app, on the app's registry."""

    def __init__(self, registry: Registry) -> None:
        r = registry
        self.utilisation = r.gauge(
            "fleetgate_reclaim_utilisation_pct",
            "A reclaimable pool's utilisation over its window so far (%), by pool.",
            ("pool",),
        )
        self.observed = r.gauge(
            "fleetgate_reclaim_observed_seconds",
            "Seconds of the window a reclaimable pool has been observed since its last change.",
            ("pool",),
        )
        self.keep = r.gauge(
            "fleetgate_reclaim_keep",
            "1 while the gateway wants the pool up, 0 once it reclaimed it (a KEDA trigger with "
            "activation above 0 keeps a replica while this is 1), by pool and alias.",
            ("pool", "alias"),
        )
        self.leader = r.gauge(
            "fleetgate_reclaim_leader",
            "1 on the replica that decides reclaims (holds the lease), 0 elsewhere.",
        )
        self.actions = r.counter(
            "fleetgate_reclaim_actions_total",
            "Reclaims and wake-ups done by this replica, by pool and action "
            "(sleep, scale_to_zero, wake).",
            ("pool", "action"),
        )
        self.skips = r.counter(
            "fleetgate_reclaim_skips_total",
            "Idle pools this replica did not reclaim, by pool and reason (only_capacity, "
            "in_flight, woken, sleep_failed).",
            ("pool", "reason"),
        )

    def bind(self, utilisation: Samples, observed: Samples, keep: Samples) -> None:
        """Read the per-pool gauges from live state when /metrics is scraped."""
        self.utilisation.set_collector(utilisation)
        self.observed.set_collector(observed)
        self.keep.set_collector(keep)
