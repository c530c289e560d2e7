"""`EngineAwareRouting`: what every engine-aware alias of one app shares.

The engines' stats (`EngineStats`, scraped metrics moved forward by local tracking), the
gateway's prefix index (`PrefixIndex`, shared between replicas through `PrefixShare`) and what
engines publishing KV events report they hold (`EventBlockIndex`), session affinity, the
decision log, the per-tenant ``cache_salt`` and index namespace, and exact prompt token ids
from an engine's ``/tokenize``. Strategies (`fleetgate.routing.kv_aware.KvAwareStrategy`,
pd-disagg, prewarm) read and record through it; it is also the dispatcher's observer.
"""

from __future__ import annotations

import os
import random
from typing import Any

import aiohttp

from fleetgate.config.schema import RoutingConfig
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.affinity import SessionTable
from fleetgate.routing.context import Pick, RouteContext
from fleetgate.routing.decisions import DecisionLog
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_stats import EngineStats, engine_key
from fleetgate.routing.kv_events import EventBlockIndex
from fleetgate.routing.kv_subscriber import KvEventSubscribers
from fleetgate.routing.prefix import PrefixIndex
from fleetgate.routing.prefix_share import PrefixShare
from fleetgate.routing.salt import TenantSalt, leading_text
from fleetgate.telemetry.registry import Registry

__all__ = ["EngineAwareRouting"]


class EngineAwareRouting:
    """What every kv-aware alias of one app shares: engine stats, prefix index, sessions, log.

    It is also the dispatcher's observer (it forwards attempts to `EngineStats`).
    """

    def __init__(
        self,
        config: RoutingConfig,
        stats: EngineStats,
        *,
        secret: bytes,
        registry: Registry | None = None,
        rng: random.Random | None = None,
        http: OutboundHttp,
    ) -> None:
        """``http``: the process's outbound session, for ``/tokenize`` (the resource owner
        closes it)."""
        self.config = config
        self.stats = stats
        self.index = PrefixIndex()
        self.sessions = SessionTable(config.affinity_ttl_s)
        self.decisions = DecisionLog(
            registry, size=config.decision_log_size, sample_rate=config.decision_sample_rate
        )
        # Every strategy's pick gets the tenant's cache_salt through this (the dispatcher).
        self.tenant_salt = TenantSalt(config, secret, lambda dep: self.stats.view(dep).engine)
        self.rng = rng or random.Random()
        self._http = http
        self.prefix_share: PrefixShare | None = None  # the index shared between replicas
        # What engines that publish KV events report they hold (trusted over `index`).
        self.kv_events = EventBlockIndex(config.kv_aware.events_resync_s)
        self.kv_subscribers = KvEventSubscribers(self.kv_events, registry)
        registry = registry or Registry()
        self._pd = registry.counter(
            "fleetgate_pd_requests_total",
            "Requests of pd-disagg aliases, by how they were served (disaggregated, or "
            "aggregated and why)",
            ["alias", "mode"],
        )
        self._predicted = registry.counter(
            "fleetgate_routing_predicted_cached_tokens_total",
            "Prompt tokens kv-aware routing expected the picked engine to hold, by the source "
            "of the prediction (events: the engine's KV events; gateway: its own index)",
            ["engine", "source"],
        )

    @classmethod
    def standalone(
        cls, http: OutboundHttp, config: RoutingConfig | None = None
    ) -> EngineAwareRouting:
        """Local tracking only: no scraper targets, a random salt secret (tests, embedding,
        checking a config)."""
        cfg = config or RoutingConfig()
        stats = EngineStats(cfg, lambda: (), http=http)
        return cls(cfg, stats, secret=os.urandom(16), http=http)

    def update_config(self, config: RoutingConfig) -> None:
        self.config = config
        self.stats.config = config
        self.tenant_salt.config = config
        self.sessions.ttl_s = config.affinity_ttl_s
        self.decisions.resize(config.decision_log_size, config.decision_sample_rate)
        self.kv_events.resync_s = config.kv_aware.events_resync_s

    # -------------------------------------------------------------- observer + lifecycle

    def dispatched(self, pick: Pick, ctx: RouteContext) -> object:
        return self.stats.dispatched(pick, ctx)

    def first_token(self, ticket: object) -> None:
        self.stats.first_token(ticket)

    def finished(self, ticket: object) -> None:
        self.stats.finished(ticket)

    async def start(self) -> None:
        await self.stats.start()
        if self.prefix_share is not None:
            await self.prefix_share.start()

    async def aclose(self) -> None:
        await self.kv_subscribers.aclose()
        await self.stats.aclose()
        if self.prefix_share is not None:
            await self.prefix_share.aclose()

    @property
    def http(self) -> OutboundHttp:
        """The side-service session (``/tokenize``, disaggregated prefill requests)."""
        return self._http

    def pd_outcome(self, alias: str, mode: str) -> None:
        self._pd.labels(alias, mode).inc()

    def predicted(self, engine: str, source: str, tokens: int) -> None:
        self._predicted.labels(engine, source).inc(tokens)

    def engine_salt(self, dep: Deployment, ctx: RouteContext) -> str | None:
        """The ``cache_salt`` ``dep`` will get for this request (the dispatcher's rule)."""
        extra = self.tenant_salt.apply(Pick(dep, None, 0), ctx).extra_body or {}
        salt = extra.get("cache_salt")
        return salt if isinstance(salt, str) else None

    def remember_prefix(self, engine: str, hashes: list[int]) -> None:
        """We are sending these blocks to ``engine``: index them here and tell the others."""
        self.index.record(engine, hashes)
        if self.prefix_share is not None:
            self.prefix_share.record(engine, hashes)

    # -------------------------------------------------------------- tenancy

    def salt(self, tenant: str) -> str:
        """The ``cache_salt`` of ``tenant``: stable across replicas sharing the secret."""
        return self.tenant_salt.salt(tenant)

    def namespace(self, ctx: RouteContext) -> tuple[str, str | None]:
        """(index namespace, cache_salt or None) of a request."""
        cfg = self.config
        lead = leading_text(ctx.request.body)
        if not cfg.tenant_isolation or any(lead.startswith(p) for p in cfg.public_prefixes):
            return "public", None
        tenant = ctx.request.principal.tenant
        return f"tenant:{tenant}", self.salt(tenant)

    # -------------------------------------------------------------- exact tokens

    async def tokenize(self, dep: Deployment, body: Any) -> list[int] | None:
        """Prompt token ids from the engine's ``/tokenize`` (vLLM, SGLang); None if unavailable."""
        if not isinstance(body, dict):
            return None
        payload: dict[str, Any] = {"model": dep.config.model}
        if isinstance(body.get("messages"), list):
            payload["messages"] = body["messages"]
        elif isinstance(body.get("prompt"), str):
            payload["prompt"] = body["prompt"]
        else:
            return None
        timeout = aiohttp.ClientTimeout(total=self.config.scrape_timeout_s)
        try:
            async with self._http.session().post(
                f"{engine_key(dep)}/tokenize", json=payload, timeout=timeout
            ) as resp:
                if resp.status != 200:
                    return None
                data = await resp.json()
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return None
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
            return tokens
        return None
