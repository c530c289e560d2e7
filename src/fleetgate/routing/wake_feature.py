"""The ``wake`` feature: scale-to-zero holds and vLLM sleep mode (always on).

The dispatcher's waker and the loop that puts idle sleep-mode deployments to sleep
(`fleetgate.routing.wake`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fleetgate.feature import BaseFeature
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.dispatch import Dispatcher
from fleetgate.routing.table import RouteTable
from fleetgate.routing.wake import Waker
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["WakeFeature"]


class WakeFeature(BaseFeature):
    """Scale-to-zero holds and vLLM sleep mode (routing/wake.py): the dispatcher's waker and
    the loop that puts idle sleep-mode deployments to sleep."""

    name = "wake"

    def __init__(self, waker: Waker) -> None:
        self.waker = waker

    @classmethod
    def build(
        cls,
        dispatcher: Dispatcher,
        table: Callable[[], RouteTable],
        http: OutboundHttp,
        metrics: GatewayMetrics,
    ) -> WakeFeature:
        waker = Waker(http, metrics, lambda: table().deployments())
        dispatcher.waker = waker

        def asleep() -> Iterable[tuple[tuple[str, str, str], bool]]:
            for d in table().deployments():
                if d.config.wake is not None:
                    yield (d.alias, d.id, d.version), d.state.asleep

        metrics.bind_asleep_gauge(asleep)
        return cls(waker)

    async def start(self) -> None:
        await self.waker.start()

    async def aclose(self) -> None:
        await self.waker.aclose()
