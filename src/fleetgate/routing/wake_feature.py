"""The ``wake`` feature: scale-to-zero holds and vLLM sleep mode (always on).

The dispatcher's waker and the loop that puts idle sleep-mode deployments to sleep
(`fleetgate.routing.wake`).
"""

from __future__ import annotations

from collections.abc import Iterable

from fleetgate.core import Core
from fleetgate.feature import BaseFeature
from fleetgate.routing.ports import TABLES, WAKER
from fleetgate.routing.wake import Waker

__all__ = ["WakeFeature"]


class WakeFeature(BaseFeature):
    """Scale-to-zero holds and vLLM sleep mode (routing/wake.py): the dispatcher's waker and
    the loop that puts idle sleep-mode deployments to sleep."""

    name = "wake"

    def __init__(self, waker: Waker) -> None:
        self.waker = waker

    @classmethod
    def build(cls, core: Core) -> WakeFeature:
        """Provides `WAKER`, which the dispatcher takes (`plug_dispatcher`)."""
        tables, metrics = core.ports.require(TABLES), core.metrics
        waker = Waker(core.resources.http, metrics, lambda: tables.table.deployments())
        core.ports.provide(WAKER, waker)

        def asleep() -> Iterable[tuple[tuple[str, str, str], bool]]:
            for d in tables.table.deployments():
                if d.config.wake is not None:
                    yield (d.alias, d.id, d.version), d.state.asleep

        metrics.bind_asleep_gauge(asleep)
        return cls(waker)

    async def start(self) -> None:
        await self.waker.start()

    async def aclose(self) -> None:
        await self.waker.aclose()
