"""The multimodal pipeline as a gateway feature (``multimodal.enabled``, on by default).

Its stage runs after tenancy (a caller over its limits costs no image fetches) and before the
guardrails (their checks see transcripts): it fetches and processes images, transcribes audio
parts, assembles prompts (system prompt, profile, retrieved documents, history) and, for
``modalities: [text, audio]``, speaks the reply. Its routes are ``/v1/audio/*`` and the team
document API. See docs/multimodal.md.
"""

from __future__ import annotations

from pathlib import Path

from fleetgate.contract.stages import Stage
from fleetgate.core import Core
from fleetgate.feature import BaseFeature, Switch
from fleetgate.multimodal.config import MULTIMODAL_SECTION
from fleetgate.multimodal.document_kv import DocumentKv
from fleetgate.multimodal.ports import MULTIMODAL
from fleetgate.multimodal.runtime import MultimodalRuntime
from fleetgate.routing.ports import ENGINE_ROUTING, TABLES
from fleetgate.routing.table import RouteTable

__all__ = ["MultimodalFeature"]


class MultimodalFeature(BaseFeature):
    name = "multimodal"
    migrations = (Path(__file__).parent / "migrations",)  # its tables' revisions
    sections = (MULTIMODAL_SECTION,)
    switch = Switch("multimodal")  # on unless `multimodal.enabled: false`

    def __init__(self, runtime: MultimodalRuntime, stage: Stage) -> None:
        self.runtime = runtime
        self.stage: Stage | None = stage

    @classmethod
    def build(cls, core: Core) -> MultimodalFeature | None:
        """Provides `MULTIMODAL` (the core serves the audio and document routes over it). The
        kv-aware routing (`ENGINE_ROUTING`, when there) prewarms changed document sets."""
        config, settings, registry = core.config, core.settings, core.metrics.registry
        resources, tables = core.resources, core.ports.require(TABLES)

        def table() -> RouteTable:
            return tables.table

        section = MULTIMODAL_SECTION.of(config)
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
            routing=core.ports.get(ENGINE_ROUTING),
            table=table,
        )
        runtime.index.listeners.append(runtime.document_kv.changed)
        core.ports.provide(MULTIMODAL, runtime)
        return cls(runtime, MultimodalStage(runtime, table))

    async def start(self) -> None:
        await self.runtime.start()

    async def aclose(self) -> None:
        if self.runtime.document_kv is not None:
            await self.runtime.document_kv.aclose()
        await self.runtime.aclose()
