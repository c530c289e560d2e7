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
import time
from collections.abc import Sequence

from fleetgate.config.schema import KvAwareConfig
from fleetgate.routing.context import Pick, RouteContext, RoutedRequest
from fleetgate.routing.decisions import CandidateCost, Decision
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.engine_stats import EngineView, engine_key
from fleetgate.routing.prefix import text_block_hashes, token_block_hashes
from fleetgate.tokens import prompt_text

__all__ = ["KvAwareStrategy", "expected_ttft"]

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
