"""The core of the gateway as a feature: the request path's routes and its shared parts.

`CoreFeature` comes first in `fleetgate.app`'s feature tuple: it serves the OpenAI and
Anthropic routes, models, health, metrics, the OpenAPI document and the config admin routes;
it starts the health prober, the access log, the per-worker metrics and the config watcher,
and closes the upstream connection pool, the tracer and the shared resources
(`fleetgate.resources.Resources`: Redis, databases, side-service HTTP) last, after every
feature using them has stopped.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from fleetgate.api import admin, completions, health, messages, models, openapi
from fleetgate.api.audio import audio_routes
from fleetgate.api.documents import document_routes
from fleetgate.api.path import REQUEST_PATH, RequestPath
from fleetgate.api.state import GATEWAY_STATE, GatewayState
from fleetgate.config.schema import GatewayConfig
from fleetgate.core import Core, Ports
from fleetgate.feature import BaseFeature
from fleetgate.multimodal.ports import MULTIMODAL

__all__ = ["CoreFeature"]


class CoreFeature(BaseFeature):
    name = "core"

    def __init__(self, gw: GatewayState, ports: Ports) -> None:
        self.gw = gw
        self._ports = ports

    @classmethod
    def build(cls, core: Core) -> CoreFeature:
        """Provides `REQUEST_PATH`: the one feature that reads `GatewayState`, it hands the
        others the request path, not the state."""
        gw = core.ports.require(GATEWAY_STATE)
        core.ports.provide(REQUEST_PATH, RequestPath(gw))
        return cls(gw, core.ports)

    def _multimodal_routes(self) -> list[web.RouteDef]:
        """Audio and documents, when the multimodal pipeline is on (asked once the app's
        features are built, when the routes are registered)."""
        runtime = self._ports.get(MULTIMODAL)
        if runtime is None:
            return []
        return [*audio_routes(runtime), *document_routes(runtime)]

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return [
            web.post("/v1/chat/completions", completions.chat_completions),
            web.post("/v1/completions", completions.completions),
            web.post("/v1/embeddings", completions.embeddings),
            web.post("/v1/messages", messages.messages),
            web.post("/v1/messages/count_tokens", messages.count_tokens),
            web.get("/v1/models", models.list_models),
            web.get("/v1/models/{model}", models.get_model),
            web.get("/health", health.health),
            web.get("/health/live", health.live),
            web.get("/health/ready", health.ready),
            web.get("/metrics", health.metrics),
            web.get("/openapi.json", openapi.openapi_json),
            web.post("/admin/config/reload", admin.reload_config),
            web.get("/admin/config", admin.get_config),
            *self._multimodal_routes(),
        ]

    def reconfigure(self, config: GatewayConfig) -> None:
        self.gw.dispatcher.config = config.router
        self.gw.health.config = config.health
        self.gw.body_timeout_s = config.server.body_timeout_s

    async def start(self) -> None:
        gw = self.gw
        await gw.health.start()
        await gw.access_log.start()
        if gw.worker_metrics is not None:
            await gw.worker_metrics.start()
        if gw.settings.watch_config:
            await gw.tables.start()

    async def aclose(self) -> None:
        gw = self.gw
        await gw.tables.aclose()
        await gw.health.aclose()
        await gw.access_log.aclose()
        if gw.worker_metrics is not None:
            await gw.worker_metrics.aclose()
        await gw.http.aclose()
        gw.tracer.shutdown()
        await gw.resources.aclose()
