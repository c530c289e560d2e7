"""``strategy: kv-aware``: send each request where its first token is expected soonest.

For every candidate engine the expected time to first token, in seconds, is::

    queue_s        = queued_prefill_tokens * prefill_s_per_token
                     + steps(queued_prefill_tokens) * decode_step_s(running)
                     + kv_wait_s(kv_usage, free blocks)
    prefill_s      = uncached_tokens * prefill_s_per_token
    interference_s = steps(uncached_tokens) * decode_step_s(running)
    cost_s         = queue_s + prefill_s + interference_s

where ``uncached_tokens`` is the prompt less the prefix the engine is expected to hold (from
`PrefixIndex` and session affinity), ``steps(n)`` the scheduler steps a prefill of ``n``
tokens takes (chunked by ``max_num_batched_tokens`` less the running decodes), and
``decode_step_s(r)`` the time one step spends on ``r`` running decodes. Engine numbers come
from `EngineStats` (scraped metrics moved forward by local tracking).

Hot-spot guard: a candidate with more than ``hotspot_slack`` requests over the least loaded one
and more than ``hotspot_ratio`` times its load is excluded while another is not.

Tenant isolation: prefixes are indexed per tenant, and vLLM engines get a per-tenant
``cache_salt`` (an HMAC of the tenant) so one tenant cannot time another's cache; prompts that
start with a ``routing.public_prefixes`` entry are indexed and cached in a shared namespace.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from fleetgate.config.schema import KvAwareConfig, RoutingConfig
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.affinity import SessionTable
from fleetgate.routing.context import Pick, RouteContext, RoutedRequest
from fleetgate.routing.decisions import CandidateCost, Decision, DecisionLog
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_stats import EngineStats, EngineView, engine_key
from fleetgate.routing.kv_events import EventBlockIndex
from fleetgate.routing.kv_subscriber import KvEventSubscribers
from fleetgate.routing.prefix import PrefixIndex, text_block_hashes, token_block_hashes
from fleetgate.routing.prefix_share import PrefixShare
from fleetgate.routing.salt import TenantSalt, leading_text
from fleetgate.telemetry.registry import Registry
from fleetgate.tokens import prompt_text

__all__ = ["EngineAwareRouting", "KvAwareStrategy", "expected_ttft"]

_CHARS_PER_TOKEN = 4


def _decode_step_s(kv: KvAwareConfig, running: float) -> float:
    if running <= 0:
        return 0.0
    return kv.decode_ms_per_step / 1000.0 * (1.0 + kv.decode_batch_factor * (running - 1))


def kv_wait_s(kv: KvAwareConfig, view: EngineView, uncached_tokens: float) -> float:
    """The wait a full KV cache adds: an engine above ``kv_high_water`` usage admits a new
    prompt only as running requests free blocks (or preempts one), so it costs up to
    ``kv_full_penalty_s``, all of it when the prompt does not fit the free blocks at all."""
    usage = view.kv_usage
    if view.num_blocks and view.block_size:
        free_tokens = (1.0 - usage) * view.num_blocks * view.block_size
        if uncached_tokens > free_tokens:
            return kv.kv_full_penalty_s
    if usage <= kv.kv_high_water:
        return 0.0
    return kv.kv_full_penalty_s * min(1.0, (usage - kv.kv_high_water) / (1.0 - kv.kv_high_water))


def expected_ttft(
    kv: KvAwareConfig, view: EngineView, uncached_tokens: float
) -> tuple[float, float, float]:
    """(queue_s, prefill_s, interference_s) of a prompt with ``uncached_tokens`` on ``view``."""
    per_token = kv.prefill_ms_per_token / 1000.0
    step = _decode_step_s(kv, view.running)
    chunk = max(1.0, kv.max_num_batched_tokens - view.running)
    queued = view.queued_prefill_tokens
    queue_s = (
        queued * per_token + math.ceil(queued / chunk) * step + kv_wait_s(kv, view, uncached_tokens)
    )
    prefill_s = uncached_tokens * per_token
    interference_s = math.ceil(max(1.0, uncached_tokens) / chunk) * step
    return queue_s, prefill_s, interference_s


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


class KvAwareStrategy:
    """Lowest expected time to first token; see the module docstring for the cost."""

    name = "kv-aware"

    def __init__(self, shared: EngineAwareRouting, alias: str) -> None:
        self.shared = shared
        self.alias = alias

    async def prepare(self, candidates: Sequence[Deployment], ctx: RouteContext) -> None:
        """With ``kv_aware.exact_tokenize``, or when a candidate publishes KV events (their
        blocks are token ids), fetch the prompt's token ids from an engine."""
        exact = self.shared.config.kv_aware.exact_tokenize or any(
            d.config.kv_events is not None for d in candidates
        )
        if exact and candidates and ctx.prompt_ids is None:
            # The least loaded candidate tokenizes (ties at random): always asking the first
            # one put every request's tokenization on one engine's API server.
            least = min(d.state.in_flight for d in candidates)
            dep = self.shared.rng.choice([d for d in candidates if d.state.in_flight == least])
            ids = await self.shared.tokenize(dep, ctx.request.body)
            if ids is not None:
                ctx.prompt_ids = ids

    def _hashes(self, ctx: RouteContext, namespace: str) -> tuple[list[int], float]:
        """Block hashes of the prompt and the tokens one block stands for."""
        kv = self.shared.config.kv_aware
        ids = ctx.prompt_ids
        if ids is not None:
            return token_block_hashes(ids, namespace, kv.index_block_tokens), kv.index_block_tokens
        text = prompt_text(ctx.request.body, kv.max_prompt_chars)
        block_chars = kv.index_block_tokens * _CHARS_PER_TOKEN
        per_char = ctx.request.prompt_tokens / len(text) if text else 0.0
        return text_block_hashes(text, namespace, block_chars), block_chars * per_char

    def _session_key(self, req: RoutedRequest) -> tuple[str, str, str] | None:
        headers = req.headers
        for name in self.shared.config.affinity_headers:
            value = headers.get(name) or headers.get(name.lower())
            if value:
                return req.principal.tenant, self.alias, value
        session = headers.get("x-session-id")
        if session:
            return req.principal.tenant, self.alias, session
        return None

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
        shared = self.shared
        req = ctx.request
        kv = shared.config.kv_aware
        namespace, _ = shared.namespace(ctx)
        hashes, tokens_per_block = self._hashes(ctx, namespace)
        key = self._session_key(req)
        entry = shared.sessions.get(key) if key is not None else None
        # The engine's own count when its token ids are known (the estimate otherwise).
        prompt = max(1, len(ctx.prompt_ids) if ctx.prompt_ids else req.prompt_tokens)
        costs: list[CandidateCost] = []
        views: list[EngineView] = []
        via_affinity: list[bool] = []
        sources: list[str] = []
        for dep in candidates:
            view = shared.stats.view(dep)
            ekey = engine_key(dep)
            if view.num_blocks and view.block_size:
                shared.index.set_capacity(
                    ekey, max(1, view.num_blocks * view.block_size // kv.index_block_tokens)
                )
            matched, source = self._matched(dep, ekey, ctx, hashes, tokens_per_block)
            sources.append(source)
            # Affinity extends a match, it never contradicts one: a session whose prompt text no
            # longer starts like the one sent before (a new system prompt) has nothing cached
            # there. Without indexable text (images only) the session is the only evidence.
            sticky = (
                entry is not None
                and entry.engine == ekey
                and sources[-1] == "gateway"  # reported blocks are not second-guessed
                and (matched > 0 or not hashes)
                and entry.prompt_tokens > matched
            )
            if sticky and entry is not None:
                matched = entry.prompt_tokens
            cached = min(matched, prompt - 1)
            queue_s, prefill_s, inter_s = expected_ttft(kv, view, prompt - cached)
            costs.append(
                CandidateCost(
                    dep.id, queue_s + prefill_s + inter_s, queue_s, prefill_s, inter_s,
                    cached, view.load,
                )
            )  # fmt: skip
            views.append(view)
            via_affinity.append(sticky)
        costs = self._guard(costs)
        allowed = [i for i, c in enumerate(costs) if c.excluded is None]
        best_cost = min(c.cost_s for c in costs)
        pick_cost = min(costs[i].cost_s for i in allowed)
        balanced = len({costs[i].cached_tokens for i in allowed}) == 1
        if balanced:
            # No replica holds more of this prompt than another: the cache has nothing to win,
            # so balance on the gateway's own in-flight counts (exact, where the queue estimate
            # from scrapes lags), then on the expected TTFT.
            fewest = min(candidates[i].state.in_flight for i in allowed)
            tied = [i for i in allowed if candidates[i].state.in_flight == fewest]
            pick_cost = min(costs[i].cost_s for i in tied)
        else:
            tied = allowed
        tied = [i for i in tied if costs[i].cost_s <= pick_cost + 1e-9]
        low = min(costs[i].load for i in tied)
        tied = [i for i in tied if costs[i].load == low]
        if len(tied) > 1:  # a new prefix goes where it evicts the least of what is cached
            sizes = [shared.index.size(engine_key(candidates[i])) for i in tied]
            tied = [i for i, size in zip(tied, sizes, strict=True) if size == min(sizes)]
        i = tied[0] if len(tied) == 1 else shared.rng.choice(tied)
        dep, chosen = candidates[i], costs[i]
        if len(candidates) == 1:
            reason = "only-candidate"
        elif any(c.excluded is not None and c.cost_s <= best_cost + 1e-9 for c in costs):
            reason = "hotspot-guard"  # the cheapest replica was excluded as a hot spot
        elif balanced or pick_cost > best_cost + 1e-9:
            reason = "load"
        elif via_affinity[i] and chosen.cached_tokens > 0:
            reason = "affinity"
        elif chosen.cached_tokens > 0:
            reason = "prefix-hit"
        else:
            reason = "load"
        ekey = engine_key(dep)
        shared.predicted(ekey, sources[i], chosen.cached_tokens)
        shared.remember_prefix(ekey, hashes)
        if key is not None:
            shared.sessions.remember(key, ekey, prompt + req.max_tokens)
        shared.decisions.record(
            Decision(
                at=time.time(),
                alias=self.alias,
                strategy=self.name,
                picked=dep.id,
                reason=reason,
                prompt_tokens=prompt,
                cached_tokens=chosen.cached_tokens,
                tenant=req.principal.tenant,
                session=key[2] if key is not None else None,
                candidates=tuple(costs),
            )
        )
        return Pick(dep, None, prompt - chosen.cached_tokens)  # salted by the dispatcher

    def _matched(
        self,
        dep: Deployment,
        ekey: str,
        ctx: RouteContext,
        hashes: list[int],
        tokens_per_block: float,
    ) -> tuple[int, str]:
        """(prefix tokens, source): from the engine's KV events while they are trusted and the
        prompt's token ids are known ("events"), else from the gateway's index ("gateway")."""
        events = self.shared.kv_events
        ids = ctx.prompt_ids
        if ids is not None and dep.config.kv_events is not None and events.trusted(ekey):
            return events.match(ekey, ids, self.shared.engine_salt(dep, ctx)), "events"
        return int(self.shared.index.match(ekey, hashes) * tokens_per_block), "gateway"

    def _guard(self, costs: list[CandidateCost]) -> list[CandidateCost]:
        kv = self.shared.config.kv_aware
        least = min(c.load for c in costs)
        out = []
        for c in costs:
            hot = c.load - least > kv.hotspot_slack and c.load > kv.hotspot_ratio * max(least, 1)
            out.append(_excluded(c) if hot else c)
        return out


def _excluded(c: CandidateCost) -> CandidateCost:
    return CandidateCost(
        c.deployment, c.cost_s, c.queue_s, c.prefill_s, c.interference_s, c.cached_tokens,
        c.load, "hotspot",
    )  # fmt: skip
