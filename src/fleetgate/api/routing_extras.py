"""Wire the semantic router and canary splits into an app (called by `create_app`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from fleetgate.api.admin_canary import CANARY
from fleetgate.api.state import GatewayState
from fleetgate.config.settings import Settings
from fleetgate.routing.canary import CanarySplits
from fleetgate.routing.semantic_stage import SemanticStage

__all__ = ["add_canary", "add_semantic"]


def add_canary(app: web.Application, settings: Settings, gw: GatewayState) -> CanarySplits:
    """Canary splits for the dispatcher and the admin API; shared through Redis if configured."""
    cfg = gw.tables.table.config.canary
    url = cfg.redis_url or settings.redis_url
    redis = None
    if url:
        import redis.asyncio as aioredis

        redis = aioredis.Redis.from_url(url)
    splits = CanarySplits(redis, prefix=cfg.redis_prefix, refresh_interval_s=cfg.refresh_interval_s)
    gw.dispatcher.versions = splits
    app[CANARY] = splits

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        splits.start()
        yield
        await splits.stop()

    app.cleanup_ctx.append(lifespan)
    return splits


def add_semantic(app: web.Application, settings: Settings, gw: GatewayState) -> None:
    """The intent router stage, when the config has a ``semantic:`` section.

    A `SemanticStage` already in ``gw.stages`` (a test's, with its own encoder) is used as is.
    """
    stage = next((s for s in gw.stages if isinstance(s, SemanticStage)), None)
    if stage is None:
        cfg = gw.tables.table.config.semantic
        if cfg is None:
            return
        stage = SemanticStage(cfg, settings.data_dir)
        gw.stages.append(stage)
    gw.virtual_aliases.add(stage.alias)

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        stage.start()
        yield
        await stage.stop()

    app.cleanup_ctx.append(lifespan)
