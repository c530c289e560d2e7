"""Cooldown of failing deployments and active probes that bring them back."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from fleetgate.config.schema import HealthConfig
from fleetgate.errors import UpstreamConnectError, UpstreamError, UpstreamStatusError
from fleetgate.routing.deployment import Deployment
from fleetgate.tasks import RunsInBackground, periodic
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["HealthTracker"]

log = logging.getLogger("fleetgate.health")


class HealthTracker(RunsInBackground):
    """Counts consecutive failures; a deployment that keeps failing is cooled down.

    A connection failure cools a deployment down at once (nothing is listening); other
    retryable failures after ``allowed_fails`` in a row; an upstream 429 for its Retry-After.
    While cooled down, a probe runs every ``probe_interval_s`` and a success returns the
    deployment to rotation before the cooldown ends.
    """

    def __init__(
        self,
        config: HealthConfig,
        metrics: GatewayMetrics,
        deployments: Callable[[], Iterable[Deployment]],
    ) -> None:
        self.config = config
        self._metrics = metrics
        self._deployments = deployments
        self._task = periodic(
            lambda: self.config.probe_interval_s, self.probe_once, log, "health probe failed"
        )

    def success(self, dep: Deployment) -> None:
        state = dep.state
        if state.consecutive_failures:
            state.consecutive_failures = 0

    def failure(self, dep: Deployment, error: UpstreamError) -> None:
        state = dep.state
        state.consecutive_failures += 1
        state.last_failure = error.message
        if not error.retryable:
            return
        duration = 0.0
        if isinstance(error, UpstreamConnectError):
            duration = self.config.cooldown_s
        elif isinstance(error, UpstreamStatusError) and error.upstream_status == 429:
            duration = min(error.retry_after or 1.0, self.config.cooldown_s)
        elif state.consecutive_failures >= self.config.allowed_fails:
            duration = self.config.cooldown_s
        if duration > 0:
            now = time.monotonic()
            if state.cooldown_until <= now:
                self._metrics.cooldowns.labels(dep.alias, dep.id).inc()
                reason = error.detail or error.message
                log.warning("cooling down %s for %.1fs: %s", dep.id, duration, reason)
            state.cooldown_until = max(state.cooldown_until, now + duration)

    async def probe_once(self) -> None:
        now = time.monotonic()
        cooling = {id(d.state): d for d in self._deployments() if d.state.cooldown_until > now}
        if not cooling:
            return
        results = await asyncio.gather(*(self._probe(d) for d in cooling.values()))
        for dep, ok in zip(cooling.values(), results, strict=True):
            if ok and dep.state.cooldown_until > time.monotonic():
                log.info("probe ok, %s back in rotation", dep.id)
                dep.state.cooldown_until = 0.0
                dep.state.consecutive_failures = 0

    async def _probe(self, dep: Deployment) -> bool:
        try:
            return await asyncio.wait_for(dep.provider.probe(), self.config.probe_timeout_s)
        except TimeoutError:
            return False
