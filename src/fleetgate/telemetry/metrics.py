"""The gateway's Prometheus metrics, by alias, deployment, version and status."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fleetgate.telemetry.registry import Registry

__all__ = ["TOKEN_BUCKETS", "GatewayMetrics"]

_FAST_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
TOKEN_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip

_DEP = ("alias", "deployment", "version")


class GatewayMetrics:
    """Every metric the request path records. One instance per app, on its own registry."""

    def __init__(self, registry: Registry | None = None) -> None:
        r = self.registry = registry or Registry()
        self.requests = r.counter(
            "fleetgate_requests_total", "Requests answered, by outcome.", (*_DEP, "status")
        )
        self.e2e = r.histogram(
            "fleetgate_request_duration_seconds", "End-to-end request latency.", _DEP
        )
        self.ttft = r.histogram("fleetgate_ttft_seconds", "Time to first token.", _DEP)
        self.itl = r.histogram(
            "fleetgate_inter_token_latency_seconds",
            "Time between streamed chunks.",
            _DEP,
            TOKEN_BUCKETS,
        )
        self.tpot = r.histogram(
            "fleetgate_time_per_output_token_seconds",
            "Decode time per output token after the first.",
            _DEP,
            TOKEN_BUCKETS,
        )
        self.overhead = r.histogram(
            "fleetgate_overhead_seconds",
            "Time spent in fleetgate itself (excludes waiting on the upstream).",
            ("alias",),
            _FAST_BUCKETS,
        )
        self.tokens = r.counter(
            "fleetgate_tokens_total", "Tokens by direction (input/output).", (*_DEP, "direction")
        )
        self.in_flight = r.gauge(
            "fleetgate_in_flight_requests", "Requests in flight per deployment.", _DEP
        )
        self.healthy = r.gauge(
            "fleetgate_deployment_healthy", "1 when a deployment is in rotation.", _DEP
        )
        self.retries = r.counter(
            "fleetgate_retries_total", "Retried attempts, by the error that caused them.",
            (*_DEP, "reason"),
        )  # fmt: skip
        self.held = r.gauge(
            "fleetgate_held_requests",
            "Requests held while their pool scales up from zero or wakes from sleep.",
            ("alias",),
        )
        self.asleep = r.gauge(
            "fleetgate_deployment_asleep", "1 while the gateway has put a deployment to sleep.",
            _DEP,
        )  # fmt: skip
        self.fallbacks = r.counter(
            "fleetgate_fallbacks_total", "Requests that moved to a fallback alias.",
            ("alias", "fallback"),
        )  # fmt: skip
        self.cooldowns = r.counter(
            "fleetgate_cooldowns_total",
            "Deployments taken out of rotation.",
            ("alias", "deployment"),
        )
        self.errors = r.counter(
            "fleetgate_errors_total", "Error responses by type.", ("status", "type")
        )
        self.config_reloads = r.counter(
            "fleetgate_config_reloads_total",
            "Config reloads by result and source (admin, file, sighup).",
            ("result", "source"),
        )
        self.client_disconnects = r.counter(
            "fleetgate_client_disconnects_total", "Clients that went away mid-request.", ("alias",)
        )

    def bind_deployment_gauges(
        self, deployments: Callable[[], Iterable[tuple[tuple[str, str, str], int, bool]]]
    ) -> None:
        """Read in-flight and health from live deployment state when /metrics is scraped."""

        def in_flight() -> Iterable[tuple[tuple[str, ...], float]]:
            for labels, count, _ in deployments():
                yield labels, float(count)

        def healthy() -> Iterable[tuple[tuple[str, ...], float]]:
            for labels, _, ok in deployments():
                yield labels, 1.0 if ok else 0.0

        self.in_flight.set_collector(in_flight)
        self.healthy.set_collector(healthy)

    def bind_asleep_gauge(
        self, deployments: Callable[[], Iterable[tuple[tuple[str, str, str], bool]]]
    ) -> None:
        """Read which deployments are asleep from live state when /metrics is scraped."""

        def asleep() -> Iterable[tuple[tuple[str, ...], float]]:
            for labels, sleeping in deployments():
                yield labels, 1.0 if sleeping else 0.0

        self.asleep.set_collector(asleep)
