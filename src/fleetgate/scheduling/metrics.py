"""The scheduler's Prometheus metrics: queue depth and wait by pool, band and team; sheds and
preemptions counted."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fleetgate.telemetry.registry import Registry

__all__ = ["SchedulingMetrics"]

_WAIT_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
)  # fmt: skip

Samples = Callable[[], Iterable[tuple[tuple[str, ...], float]]]


class SchedulingMetrics:
    """One per app, on the app's registry."""

    def __init__(self, registry: Registry) -> None:
        r = registry
        self.queue_depth = r.gauge(
            "fleetgate_scheduling_queue_depth",
            "Requests waiting for admission, by pool and band.",
            ("pool", "band"),
        )
        self.in_flight = r.gauge(
            "fleetgate_scheduling_admitted",
            "Requests admitted and not finished, by pool.",
            ("pool",),
        )
        self.limit = r.gauge(
            "fleetgate_scheduling_limit",
            "The pool's admission limit now (absent: unbounded).",
            ("pool",),
        )
        self.wait = r.histogram(
            "fleetgate_scheduling_queue_wait_seconds",
            "Time queued requests waited before admission, by pool, band and team.",
            ("pool", "band", "team"),
            _WAIT_BUCKETS,
        )
        self.queued = r.counter(
            "fleetgate_scheduling_queued_total",
            "Requests that had to queue, by pool, band and team.",
            ("pool", "band", "team"),
        )
        self.sheds = r.counter(
            "fleetgate_scheduling_sheds_total",
            "Requests refused or shed by the scheduler, by pool, band, team and reason.",
            ("pool", "band", "team", "reason"),
        )
        self.preemptions = r.counter(
            "fleetgate_scheduling_preemptions_total",
            "Queued requests displaced by a higher band, by pool, their band and the band that "
            "took their place.",
            ("pool", "band", "by_band"),
        )

        # A fleet (admission shared through Redis): `admitted` above is the fleet's, as this
        # process last synced it; these say which process a series is.
        self.lease = r.gauge(
            "fleetgate_scheduling_lease",
            "Slots of the pool leased to this process (a fleet's shared admission only).",
            ("pool", "process"),
        )
        self.admitted_here = r.gauge(
            "fleetgate_scheduling_admitted_here",
            "Requests this process admitted and has not finished (a fleet's only).",
            ("pool", "process"),
        )

    def bind(self, depth: Samples, admitted: Samples, limit: Samples) -> None:
        """Gauges read from the live pools when rendered."""
        self.queue_depth.set_collector(depth)
        self.in_flight.set_collector(admitted)
        self.limit.set_collector(limit)

    def bind_fleet(self, lease: Samples, here: Samples) -> None:
        """The fleet's gauges, read from the live pools when rendered."""
        self.lease.set_collector(lease)
        self.admitted_here.set_collector(here)
