"""The console as a gateway feature: the ``/ui`` pages, their static files and sign-in.

On by default (``console.enabled: false`` switches it off; the old ``extensions.console`` is
still read); it needs tenancy (keys, teams, spend). Its
front-end package (htmx) comes from the npm registry into ``node_modules/`` beside this module
(``npm ci``, run by ``make``); the pages work without it, htmx only makes paging and filtering
swap in place.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Protocol

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.console.audit import AuditPages, GuardrailEvents
from fleetgate.console.bearer import JwtBearer
from fleetgate.console.config import CONSOLE_SECTION, ConsoleConfig
from fleetgate.console.core import Console
from fleetgate.console.insights import InsightsPages
from fleetgate.console.insights_reviews import ReviewPages
from fleetgate.console.keys import KeyPages
from fleetgate.console.login import LoginPages
from fleetgate.console.models import ModelPages, Rollouts
from fleetgate.console.oidc import OidcPages
from fleetgate.console.overview import MetricWindow, OverviewPage
from fleetgate.console.pipelines import PipelinePages
from fleetgate.console.playground import Playground
from fleetgate.console.queues import QueuePage
from fleetgate.console.registry import RegistryPages, Releases
from fleetgate.console.routing import RoutingPage
from fleetgate.console.spend import SpendPages
from fleetgate.core import Core, Ports
from fleetgate.disclosure.ports import DISCLOSURE
from fleetgate.errors import FleetgateError, NotFound
from fleetgate.feature import BaseFeature, Switch
from fleetgate.insights.ports import INSIGHTS
from fleetgate.releases.feature import RELEASES
from fleetgate.safety.ports import GUARDRAIL_EVENTS
from fleetgate.store.errors import store_unavailable_is_503
from fleetgate.tasks import cancel_and_wait
from fleetgate.tenancy.auth import looks_like_jwt
from fleetgate.tenancy.ports import TENANCY

__all__ = ["HERE", "NPM_SOURCES", "VENDOR", "ConsoleFeature"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
HERE = Path(__file__).parent
# The npm packages' files the pages load, by the name they are served under: copied from
# node_modules/ into static/vendor/ (git-ignored) by `make` and by the image's console stage
# (deploy/Dockerfile), so the wheel ships them (package data) and the image serves them.
VENDOR = {"htmx.min.js": HERE / "static" / "vendor" / "htmx.min.js"}
NPM_SOURCES = {"htmx.min.js": Path("htmx.org") / "dist" / "htmx.min.js"}  # under node_modules/


class _Pages(Protocol):
    def routes(self) -> list[web.RouteDef]: ...


class ConsoleFeature(BaseFeature):
    name = "console"
    sections = (CONSOLE_SECTION,)
    switch = Switch("console")

    def __init__(
        self,
        core: Core,
        config: ConsoleConfig,
        ports: Ports,
        *,
        rollouts: Rollouts | None = None,
        guardrails: GuardrailEvents | None = None,
        releases: Releases | None = None,
    ) -> None:
        self.console = Console(core, config, ports)
        self.window = MetricWindow(core.metrics)
        http = core.resources.http  # the owner's outbound session; the owner closes it
        self.playground = Playground(self.console, http)
        self.oidc = OidcPages(self.console, http)
        # JWT bearer tokens for API callers (`build` puts it in the authenticator chain)
        self.bearer = (
            JwtBearer(config.jwt, self.console.tenancy.cache, http)
            if config.jwt is not None
            else None
        )
        self._pages: list[_Pages] = [
            LoginPages(self.console),
            self.oidc,
            OverviewPage(self.console, self.window),
            KeyPages(self.console),
            SpendPages(self.console),
            ModelPages(self.console, rollouts, ports.get(DISCLOSURE)),
            RegistryPages(self.console, releases),
            PipelinePages(self.console, releases),
            QueuePage(self.console),
            RoutingPage(self.console),
            AuditPages(self.console, guardrails),
            InsightsPages(self.console, ports.get(INSIGHTS)),
            ReviewPages(self.console, ports.get(INSIGHTS)),
            self.playground,
        ]
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def build(cls, core: Core) -> ConsoleFeature | None:
        """The console, or None when tenancy (its data) is off. Its JWT bearer (when ``jwt``
        is set) answers the tokens shaped like a JWT, before tenancy's keys."""
        cfg = CONSOLE_SECTION.of(core.config)
        ports = core.ports
        if TENANCY not in ports:
            return None
        releases = ports.get(RELEASES)
        feature = cls(
            core,
            cfg,
            ports,
            rollouts=releases.rollouts if releases is not None else None,
            guardrails=ports.get(GUARDRAIL_EVENTS),
            releases=releases,
        )
        if feature.bearer is not None:
            core.auth.add(feature.bearer, claims=looks_like_jwt)
        return feature

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        routes: list[web.AbstractRouteDef] = [
            web.static("/ui/static", HERE / "static", append_version=False),
            web.get("/ui/vendor/{name}", self.vendor),
        ]
        for page in self._pages:  # an unreachable database is a 503, as on the admin API
            routes.extend(
                web.route(r.method, r.path, self._as_page(store_unavailable_is_503(r.handler)))
                for r in page.routes()
            )
        return routes

    def _as_page(self, handler: Handler) -> Handler:
        """Errors of a page a browser navigated to come back as a page (same status); the
        playground's fetch, htmx swaps and the CSV keep the JSON error."""

        @functools.wraps(handler)
        async def page(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except FleetgateError as exc:
                if "text/html" not in request.headers.get("Accept", "") or (
                    "HX-Request" in request.headers
                ):
                    raise
                return await self.console.error_page(request, exc)

        return page

    async def vendor(self, request: web.Request) -> web.FileResponse:
        path = VENDOR.get(request.match_info["name"])
        if path is None or not path.is_file():
            raise NotFound("No such console asset (run `make` or `npm ci` in the console).")
        return web.FileResponse(path, headers={"Cache-Control": "public, max-age=3600"})

    def reconfigure(self, config: GatewayConfig) -> None:
        cfg = CONSOLE_SECTION.of(config)
        self.console.config = cfg
        self.console.sessions.ttl_s = cfg.session_ttl_s
        self.console.sessions.limit = cfg.max_sessions
        self.console.sessions.per_principal = cfg.max_sessions_per_principal

    async def start(self) -> None:
        self._task = asyncio.create_task(self.window.run(), name="console-metric-window")
        if self.bearer is not None:
            await self.bearer.start()

    async def aclose(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        if self.bearer is not None:
            await self.bearer.aclose()
