"""The multimodal pipeline as a gateway feature (``multimodal.enabled``, on by default).

Its stage runs after tenancy (a caller over its limits costs no image fetches) and before the
guardrails (their checks see transcripts): it fetches and processes images, transcribes audio
parts, assembles prompts (system prompt, profile, retrieved documents, history) and, for
``modalities: [text, audio]``, speaks the reply. Its routes are ``/v1/audio/*`` and the team
document API. See docs/multimodal.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.contract.stages import Stage
from fleetgate.feature import BaseFeature
from fleetgate.multimodal.config import MULTIMODAL_SECTION
from fleetgate.multimodal.document_kv import DocumentKv
from fleetgate.multimodal.runtime import MultimodalRuntime
from fleetgate.resources import Resources
from fleetgate.routing.kv_aware import EngineAwareRouting
from fleetgate.routing.table import RouteTable
from fleetgate.telemetry.registry import Registry

__all__ = ["MultimodalFeature"]


class MultimodalFeature(BaseFeature):
    name = "multimodal"

    def __init__(
        self, runtime: MultimodalRuntime, stage: Stage, routes: Sequence[web.AbstractRouteDef]
    ) -> None:
        self.runtime = runtime
        self.stage: Stage | None = stage
        self._routes = tuple(routes)

    @classmethod
    def build(
        cls,
        settings: Settings,
        config: GatewayConfig,
        registry: Registry,
        table: Callable[[], RouteTable],
        routes: Sequence[web.AbstractRouteDef],
        resources: Resources,
        engine_routing: EngineAwareRouting | None = None,
    ) -> MultimodalFeature | None:
        """``engine_routing``: the kv-aware routing, for the prewarm of changed document sets
        (without it their hit rates are still reported)."""
        section = MULTIMODAL_SECTION.of(config)
        if not section.enabled:
            return None
        from fleetgate.multimodal.stage import MultimodalStage

        runtime = MultimodalRuntime(
            section,
            settings,
            registry,
            resources=resources,
            redis_prefix=config.tenancy.redis_prefix,
        )
        runtime.document_kv = DocumentKv(
            section.prompts,
            runtime.assembler,
            registry,
            routing=engine_routing,
            table=table,
        )
        runtime.index.listeners.append(runtime.document_kv.changed)
        return cls(runtime, MultimodalStage(runtime, table), routes)

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return self._routes

    async def start(self) -> None:
        await self.runtime.start()

    async def aclose(self) -> None:
        if self.runtime.document_kv is not None:
            await self.runtime.document_kv.aclose()
        await self.runtime.aclose()
