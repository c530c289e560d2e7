"""`CostFeature`: scrape DCGM exporters and the pools' engines, serve ``GET /admin/cost``.

On when the config has a ``cost:`` section (`fleetgate.cost.config`; the old place,
``extensions.cost``, is still read). Every
``scrape_interval_s`` it reads each pool's dcgm-exporter endpoints and the ``/metrics`` of the
alias's engines (requests running and waiting, as engine-aware routing reads them), and adds one
tick per pool to the `CostLedger`. A reloaded config swaps the section in (pools no longer
listed are forgotten); an invalid reloaded section keeps the previous one.

``GET /admin/cost?hours=H`` (default and at most ``window_h``): the master key sees every pool,
every team's share and the reclaim recommendations; a team admin key sees its own team's rows
only (its tokens, share, cost and idle cost per pool), as with ``/admin/spend``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from pydantic import ValidationError

from fleetgate.config.schema import GatewayConfig
from fleetgate.core import Core
from fleetgate.cost.config import COST_SECTION, CostConfig, PoolConfig
from fleetgate.cost.dcgm import GpuSample, parse_dcgm
from fleetgate.cost.ledger import CostLedger
from fleetgate.cost.report import pool_report, team_rows, team_tokens
from fleetgate.errors import ConfigError, InvalidRequest
from fleetgate.feature import BaseFeature, Switch
from fleetgate.http import AdminAccess, json_reply
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.engine_metrics import parse_engine_metrics
from fleetgate.store.database import Database
from fleetgate.store.errors import store_unavailable_is_503
from fleetgate.tasks import Background, RunsInBackground

__all__ = ["CostFeature", "parse_cost_config"]

log = logging.getLogger("fleetgate.cost")
NAME = "cost"


def parse_cost_config(config: GatewayConfig) -> CostConfig | None:
    """The ``cost:`` section (or the old ``extensions.cost``) validated (``ConfigError``
    naming the field), or None when absent."""
    place = NAME if NAME in config.sections else f"extensions.{NAME}"
    raw = config.sections.get(NAME, config.extensions.get(NAME))
    if raw is None:
        return None
    try:
        cost = CostConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{place}.{where}: {first['msg']}") from None
    aliases = {m.alias for m in config.models}
    unknown = sorted(p.alias for p in cost.pools if p.alias not in aliases)
    if unknown:
        raise ConfigError(f"{place}: pool {', '.join(unknown)} is not a configured alias")
    return cost


@dataclass(eq=False, repr=False)
class CostFeature(RunsInBackground, BaseFeature):
    """The scraper loop, its ledger and the admin route."""

    name = NAME
    sections = (COST_SECTION,)
    switch = Switch(NAME, opt_in=True)
    admin_routes = (("GET", "/admin/cost"),)

    cost: CostConfig
    config: GatewayConfig
    access: AdminAccess
    http: OutboundHttp
    db: Database | None
    _: KW_ONLY
    clock: Callable[[], float] = time.time
    ledger: CostLedger = field(init=False)
    scrapes: int = field(default=0, init=False)
    _task: Background = field(init=False)
    _warned: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.ledger = CostLedger(self.cost.window_h * 3600.0)
        self._task = Background(self._run, name="fleetgate-cost")

    @classmethod
    def build(cls, core: Core) -> CostFeature | None:
        settings, config, resources, access = (
            core.settings,
            core.config,
            core.resources,
            core.access,
        )
        cost = parse_cost_config(config)
        if cost is None:
            return None
        db = None
        if config.tenancy.enabled:  # the spend table exists (tenancy migrates it)
            db = resources.databases.get(settings.database_url, settings.data_dir)
        return cls(cost, config, access, resources.http, db)

    # ------------------------------------------------------------------ lifecycle

    def reconfigure(self, config: GatewayConfig) -> None:
        cost = parse_cost_config(config)  # raises: Features logs it, the old section stays
        self.config = config
        if cost is not None:
            self.cost = cost
            self.ledger.window_s = cost.window_h * 3600.0
            self.ledger.forget({p.alias for p in cost.pools})

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.scrape_once()
            except Exception:  # never let one bad scrape end the loop
                log.exception("GPU cost scrape failed")
            spent = time.monotonic() - started
            await asyncio.sleep(max(0.0, self.cost.scrape_interval_s - spent))

    # ------------------------------------------------------------------ scraping

    async def _get(self, url: str, headers: dict[str, str] | None = None) -> str | None:
        timeout = aiohttp.ClientTimeout(total=self.cost.scrape_timeout_s)
        try:
            async with self.http.session().get(url, headers=headers, timeout=timeout) as resp:
                if resp.status != 200:
                    raise aiohttp.ClientError(f"status {resp.status}")
                text = await resp.text()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if url not in self._warned:
                self._warned.add(url)
                log.warning("cost scrape of %s failed: %s", url, exc)
            return None
        self._warned.discard(url)
        return text

    async def _gpus(self, pool: PoolConfig) -> list[GpuSample] | None:
        texts = await asyncio.gather(*(self._get(u) for u in pool.dcgm))
        if all(t is None for t in texts):
            return None
        seen: dict[str, GpuSample] = {}
        for text in texts:
            for s in parse_dcgm(text or ""):
                if not pool.gpus or s.uuid in pool.gpus or s.gpu in pool.gpus:
                    seen.setdefault(s.uuid, s)
        return list(seen.values())

    async def _inflight(self, pool: PoolConfig) -> float | None:
        alias = self.config.alias(pool.alias)
        if alias is None:
            return None
        bases = {d.api_base.removesuffix("/v1"): d.api_key for d in alias.deployments}
        texts = await asyncio.gather(*(
            self._get(f"{b}/metrics", {"Authorization": f"Bearer {k}"} if k else None)
            for b, k in bases.items()
        ))  # fmt: skip
        snaps = [parse_engine_metrics(t) for t in texts if t is not None]
        known = [s for s in snaps if s.known]
        return sum(s.running + s.waiting for s in known) if known else None

    async def _scrape_pool(self, pool: PoolConfig) -> None:
        gpus, inflight = await asyncio.gather(self._gpus(pool), self._inflight(pool))
        if gpus is None:
            return  # unobserved: the gap is not counted (see CostLedger)
        self.ledger.add(
            pool.alias, gpus, engine_inflight=inflight, at=self.clock(),
            interval_s=self.cost.scrape_interval_s, idle_pct=self.cost.idle_below_util_pct,
        )  # fmt: skip

    async def scrape_once(self) -> None:
        """Scrape every pool once, concurrently."""
        await asyncio.gather(*(self._scrape_pool(p) for p in self.cost.pools))
        self.scrapes += 1

    # ------------------------------------------------------------------ report

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/admin/cost", store_unavailable_is_503(self.get_cost))]

    def _hours(self, request: web.Request) -> float:
        raw = request.query.get("hours")
        if raw is None:
            return self.cost.window_h
        try:
            hours = float(raw)
        except ValueError:
            raise InvalidRequest("'hours' must be a number", param="hours") from None
        if not 0 < hours <= self.cost.window_h:
            raise InvalidRequest(
                f"'hours' must be within (0, {self.cost.window_h:g}] (cost.window_h)",
                param="hours",
            )
        return hours

    async def report(self, hours: float, team_id: str | None = None) -> dict[str, Any]:
        """The report over the last ``hours`` (only ``team_id``'s rows when given)."""
        now = self.clock()
        since = now - hours * 3600.0
        pools = [pool_report(self.cost, self.ledger, p, since) for p in self.cost.pools]
        out: dict[str, Any] = {"window_hours": hours, "since": since, "until": now}
        teams: list[dict[str, Any]] = []
        if self.db is None:
            out["teams_note"] = "tenancy is off: no spend table to share costs by"
        else:
            aliases = [p.alias for p in self.cost.pools]
            tokens, names = await team_tokens(self.db, aliases, int(since * 1000))
            totals: dict[str, int] = {}
            for (_, alias), n in tokens.items():
                totals[alias] = totals.get(alias, 0) + n
            if team_id is not None:
                tokens = {k: v for k, v in tokens.items() if k[0] == team_id}
            teams = team_rows(pools, tokens, totals, names)
        out["teams"] = teams
        if team_id is None:
            out["pools"] = pools
            out["totals"] = {
                k: sum(p[k] for p in pools)
                for k in ("gpu_hours", "idle_gpu_hours", "cost_usd", "idle_cost_usd")
            }
            out["recommendations"] = [
                {"pool": p["pool"], **p["recommendation"]}
                for p in pools
                if p["recommendation"]["action"] in ("release", "scale_to_zero")
            ]
        return out

    async def get_cost(self, request: web.Request) -> web.Response:
        """``GET /admin/cost?hours=H``."""
        actor = self.access.admin(request)
        hours = self._hours(request)
        team = None if actor.is_master else actor.team_id
        body = await self.report(hours, team)
        await self.access.record(actor, "cost.read", "cost", {"hours": hours})
        return json_reply(body)
