"""Every route of the gateway, in one table."""

from __future__ import annotations

from aiohttp import web

from fleetgate.api import admin, admin_routing, completions, health, messages, models, openapi
from fleetgate.api.admin_canary import add_canary_routes
from fleetgate.api.admin_tenancy import add_tenancy_routes

__all__ = ["add_routes"]


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", completions.chat_completions)
    app.router.add_post("/v1/completions", completions.completions)
    app.router.add_post("/v1/embeddings", completions.embeddings)
    app.router.add_post("/v1/messages", messages.messages)
    app.router.add_post("/v1/messages/count_tokens", messages.count_tokens)
    app.router.add_get("/v1/models", models.list_models)
    app.router.add_get("/v1/models/{model}", models.get_model)
    app.router.add_get("/health/live", health.live)
    app.router.add_get("/health/ready", health.ready)
    app.router.add_get("/metrics", health.metrics)
    app.router.add_get("/openapi.json", openapi.openapi_json)
    app.router.add_post("/admin/config/reload", admin.reload_config)
    app.router.add_get("/admin/config", admin.get_config)
    add_tenancy_routes(app)
    add_canary_routes(app)
    app.router.add_get("/admin/routing/decisions", admin_routing.routing_decisions)
    app.router.add_get("/admin/routing/engines", admin_routing.routing_engines)
