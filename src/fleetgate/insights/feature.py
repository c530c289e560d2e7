"""`InsightsFeature`: records each request's end user, session and plan (`insights.usage`),
writes them with their rollups (`insights.writer`) and serves the business metrics and the key
report (`insights.routes`). Opt-in (the ``insights:`` section); needs tenancy (its database
and the teams' payload policy), else it is not built and its routes answer 503.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.core import Core
from fleetgate.feature import BaseFeature, Switch
from fleetgate.insights.config import INSIGHTS_SECTION, InsightsConfig
from fleetgate.insights.grounding import GroundednessScorer
from fleetgate.insights.metrics import InsightsMetrics
from fleetgate.insights.ports import INSIGHTS
from fleetgate.insights.quality_routes import QualityRoutes
from fleetgate.insights.reports import InsightsReports
from fleetgate.insights.routes import InsightsAdmin
from fleetgate.insights.usage import Pseudonyms, UsageRecorder
from fleetgate.insights.writer import InsightsWriter
from fleetgate.resources.minilm import MiniLMEmbedder
from fleetgate.tenancy.ports import TENANCY
from fleetgate.tenancy.runtime import Tenancy

__all__ = ["InsightsFeature"]

_FALLBACK_SECRET = b"fleetgate-insights"  # no master key: ids are pseudonymous, not secret


class InsightsFeature(BaseFeature):
    name = "insights"
    migrations = (Path(__file__).parent / "migrations",)  # its tables' revisions
    sections = (INSIGHTS_SECTION,)
    switch = Switch("insights", opt_in=True)
    admin_routes = (
        ("GET", "/admin/insights/business"),
        ("GET", "/admin/insights/keys"),
        ("GET", "/admin/insights/quality"),
        ("GET", "/admin/insights/reviews"),
        ("POST", "/admin/insights/reviews/{request_id}"),
        ("POST", "/v1/insights/events"),
        ("POST", "/v1/insights/grounding"),
    )

    def __init__(self, core: Core, config: InsightsConfig, tenancy: Tenancy) -> None:
        self.config = config
        self._aliases = [m.alias for m in core.config.models]
        self.writer = InsightsWriter(
            tenancy.db,
            lambda: self.config.paid_plans,
            max_buffered=config.max_buffered,
            interval_s=config.flush_interval_s,
        )
        secret = (core.settings.master_key or "").encode() or _FALLBACK_SECRET
        self.stage = UsageRecorder(
            lambda: self.config, self.writer, Pseudonyms(secret), self._logs_payloads(tenancy)
        )
        self.reports = InsightsReports(
            tenancy.db, lambda: self.config, lambda: self._aliases,
            logs_payloads=self._logs_payloads(tenancy),
        )  # fmt: skip
        self._admin = InsightsAdmin(self.reports, core.access, lambda: self.config)
        minilm = core.resources.minilm
        self._scorer: GroundednessScorer | None = None

        def scorer() -> GroundednessScorer:  # MiniLM is loaded on the first sample only
            if self._scorer is None:
                self._scorer = GroundednessScorer(MiniLMEmbedder(minilm))
            return self._scorer

        self.metrics = InsightsMetrics(
            core.metrics.registry, self.reports, self.writer, lambda: self.config.metrics_interval_s
        )
        self._quality = QualityRoutes(
            self.writer, core.access, lambda: self.config, scorer, self.reports, self.metrics.events
        )

    @staticmethod
    def _logs_payloads(tenancy: Tenancy) -> Callable[[str | None], bool]:
        def logs(team_id: str | None) -> bool:
            team = tenancy.cache.team(team_id) if team_id else None
            return team is not None and bool(team.log_payloads)

        return logs

    @classmethod
    def build(cls, core: Core) -> InsightsFeature | None:
        config = INSIGHTS_SECTION.of(core.config)
        tenancy = core.ports.get(TENANCY)
        if config is None or tenancy is None:
            return None
        feature = cls(core, config, tenancy)
        core.ports.provide(INSIGHTS, feature.reports)  # the console's insights pages read it
        return feature

    def reconfigure(self, config: GatewayConfig) -> None:
        self.config = INSIGHTS_SECTION.of(config) or self.config
        self._aliases = [m.alias for m in config.models]

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return [*self._admin.routes(), *self._quality.routes()]

    async def start(self) -> None:
        self.writer.start()
        self.metrics.start()

    async def aclose(self) -> None:
        await self.metrics.aclose()
        await self.writer.aclose()
