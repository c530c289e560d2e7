"""`CacheFeature`: the response caches on the request path (see `fleetgate.cache.stage`).

The exact cache lives in Redis when the process has one (``FLEETGATE_REDIS_URL``: every
replica shares it, through the process's one Redis owner), else in this process (a bounded
LRU). The semantic cache embeds with the process's one MiniLM (`fleetgate.resources`) and
keeps its index in this process.
"""

from __future__ import annotations

import asyncio
import logging

from fleetgate.cache.config import CACHE_SECTION, CacheConfig
from fleetgate.cache.exact import ExactStore, MemoryExactStore, RedisExactStore
from fleetgate.cache.semantic import SemanticIndex
from fleetgate.cache.stage import CacheStage
from fleetgate.config.schema import GatewayConfig
from fleetgate.core import Core
from fleetgate.feature import BaseFeature
from fleetgate.resources import MiniLMEmbedder, Resources
from fleetgate.tasks import cancel_and_wait

__all__ = ["CacheFeature"]

log = logging.getLogger("fleetgate.cache")


def _aliases(config: GatewayConfig) -> dict[str, CacheConfig]:
    caches = {a.alias: CACHE_SECTION.of(a) for a in config.models}
    return {alias: cache for alias, cache in caches.items() if cache is not None and cache.enabled}


def _max_entries(aliases: dict[str, CacheConfig]) -> int:
    return max((c.max_entries for c in aliases.values()), default=10_000)


class CacheFeature(BaseFeature):
    name = "cache"
    sections = (CACHE_SECTION,)

    def __init__(self, stage: CacheStage, resources: Resources | None = None) -> None:
        # On the request path only when an alias has a cache at start: a config without one
        # costs nothing (a reload that adds the first cache takes effect at the next start).
        self.stage = stage if stage.aliases else None
        self.cache_stage = stage
        self.resources = resources
        self._warm: asyncio.Task[None] | None = None

    @classmethod
    def build(cls, core: Core) -> CacheFeature:
        settings, config, resources = core.settings, core.config, core.resources
        aliases = _aliases(config)
        exact: ExactStore
        if settings.redis_url:
            client = resources.redis.client(settings.redis_url)
            exact = RedisExactStore(client, config.tenancy.redis_prefix + "cache:")
        else:
            exact = MemoryExactStore(_max_entries(aliases))
        embedder = MiniLMEmbedder(resources.minilm)
        stage = CacheStage(aliases, exact, SemanticIndex(), embedder, core.metrics.registry)
        return cls(stage, resources)

    def reconfigure(self, config: GatewayConfig) -> None:
        aliases = _aliases(config)
        self.cache_stage.aliases = aliases
        if isinstance(self.cache_stage.exact, MemoryExactStore):
            self.cache_stage.exact.max_entries = _max_entries(aliases)

    async def start(self) -> None:
        semantic = any(c.semantic is not None for c in self.cache_stage.aliases.values())
        if semantic and self.resources is not None and not self.resources.minilm.loaded:
            self._warm = asyncio.create_task(self._load())

    async def _load(self) -> None:
        assert self.resources is not None
        try:
            await asyncio.to_thread(self.resources.minilm.model)
        except Exception:
            log.exception("response cache: MiniLM could not be loaded")

    async def aclose(self) -> None:
        if self._warm is not None:
            await cancel_and_wait(self._warm)
            self._warm = None
        await self.cache_stage.drain()
