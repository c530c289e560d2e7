"""``strategy: pd-disagg``: prefill on one pool, decode on another (vLLM disaggregated serving).

An alias's deployments tagged ``prefill`` form the prefill pool, those tagged ``decode`` the
decode pool. For a prompt of at least ``routing.kv_aware.pd_min_prompt_tokens`` tokens, with a
healthy engine in each pool, the gateway runs the two-step protocol of vLLM's disaggregated
proxy (the NIXL connector's):

1. ``prepare``: the prefill engine, chosen by the kv-aware cost (prefix hits, from KV events
   where published, and queue), gets the request with ``max_tokens: 1``, ``stream: false`` and
   ``"kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false,
   "remote_engine_id": null, "remote_block_ids": null, "remote_host": null, "remote_port":
   null}``; its answer's ``kv_transfer_params`` say where the prompt's KV blocks are.
2. ``pick``: the decode engine, chosen by KV capacity (the prompt and its output fit its free
   blocks) and then the smallest running batch, gets the client's request (streamed if asked)
   with those ``kv_transfer_params``; it pulls the KV instead of computing it.

Anything else is served aggregated by the kv-aware strategy, on the decode pool while it has a
healthy engine (else on the prefill pool): short prompts (the transfer costs more than it
saves), a pool with no healthy engine, a prefill request that failed.
``fleetgate_pd_requests_total{alias, mode}`` counts each outcome.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from fleetgate.providers.engine_fields import client_fields
from fleetgate.routing.context import Pick, RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_aware import EngineAwareRouting
from fleetgate.routing.kv_aware import KvAwareStrategy

__all__ = ["DisaggStrategy", "prefill_body"]

_PREFILL_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def prefill_body(body: dict[str, Any], model: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The prefill half of ``body`` for ``model`` (vLLM's proxy: one token, not streamed),
    without the client's engine-only fields (`fleetgate.providers.engine_fields`)."""
    out = {**client_fields(body), **extra, "model": model, "stream": False, "max_tokens": 1}
    out["kv_transfer_params"] = dict(_PREFILL_PARAMS)
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    for name in ("stream_options", "min_tokens", "min_completion_tokens", "n"):
        out.pop(name, None)
    return out


def _pool(candidates: Sequence[Deployment], tag: str, now: float) -> list[Deployment]:
    return [d for d in candidates if tag in d.config.tags and d.state.healthy(now)]


class DisaggStrategy:
    """Prefill/decode pools with a fallback to aggregated serving; see the module docstring."""

    name = "pd-disagg"

    def __init__(self, shared: EngineAwareRouting, alias: str) -> None:
        self.shared = shared
        self.alias = alias
        self.kv = KvAwareStrategy(shared, alias)

    async def prepare(self, candidates: Sequence[Deployment], ctx: RouteContext) -> None:
        await self.kv.prepare(candidates, ctx)
        ctx.kv_transfer = None
        now = time.monotonic()
        prefill, decode = _pool(candidates, "prefill", now), _pool(candidates, "decode", now)
        ids = ctx.prompt_ids
        prompt = len(ids) if ids else ctx.request.prompt_tokens
        if prompt < self.shared.config.kv_aware.pd_min_prompt_tokens:
            self.shared.pd_outcome(self.alias, "aggregated-short")
            return
        if not prefill or not decode:
            self.shared.pd_outcome(self.alias, "aggregated-pool-down")
            return
        pick = self.shared.tenant_salt.apply(self.kv.pick(prefill, ctx), ctx)
        params = await self._prefill(pick, ctx)
        if params is None:
            self.shared.pd_outcome(self.alias, "aggregated-prefill-failed")
            return
        ctx.kv_transfer = params
        self.shared.pd_outcome(self.alias, "disaggregated")

    def pick(self, candidates: Sequence[Deployment], ctx: RouteContext) -> Pick:
        decode = [d for d in candidates if "decode" in d.config.tags]
        if ctx.kv_transfer is not None and decode:
            dep = self._decode_engine(decode, ctx)
            return Pick(dep, {"kv_transfer_params": ctx.kv_transfer}, 0)
        # Served aggregated: on the decode pool while it has an engine. A prefill engine would
        # run this request's decode steps between its long prefill chunks (each step as long
        # as a chunk), and its prefill would queue behind them.
        return self.kv.pick(decode or candidates, ctx)

    def _decode_engine(self, decode: Sequence[Deployment], ctx: RouteContext) -> Deployment:
        """The engine whose free KV holds the request, then with the smallest running batch."""
        req = ctx.request
        need = (len(ctx.prompt_ids) if ctx.prompt_ids else req.prompt_tokens) + req.max_tokens
        best: list[tuple[tuple[bool, float, float], Deployment]] = []
        for dep in decode:
            view = self.shared.stats.view(dep)
            fits = True
            if view.num_blocks and view.block_size:
                fits = (1.0 - view.kv_usage) * view.num_blocks * view.block_size >= need
            best.append(((not fits, view.load, view.kv_usage), dep))
        low = min(key for key, _ in best)
        tied = [dep for key, dep in best if key == low]
        return tied[0] if len(tied) == 1 else self.shared.rng.choice(tied)

    async def _prefill(self, pick: Pick, ctx: RouteContext) -> dict[str, Any] | None:
        """Run the prefill half on ``pick``; its ``kv_transfer_params``, None on failure."""
        dep = pick.deployment
        cfg = dep.config
        body = prefill_body(ctx.request.body, cfg.model, dict(pick.extra_body or {}))
        if ctx.ec_transfer:  # the images were encoded on an encoder pool (E -> P -> D)
            body["ec_transfer_params"] = ctx.ec_transfer
        path = "/chat/completions" if "messages" in body else "/completions"
        headers = dict(cfg.extra_headers)
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        total = cfg.timeouts.first_token if cfg.timeouts is not None else 60.0
        dep.state.in_flight += 1
        ticket = self.shared.dispatched(pick, ctx)
        try:
            async with self.shared.http.session().post(
                f"{cfg.api_base}{path}",
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=total),
            ) as resp:
                answer = await resp.json(content_type=None) if resp.status == 200 else None
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            answer = None
        finally:
            dep.state.in_flight -= 1
            self.shared.first_token(ticket)
            self.shared.finished(ticket)
        params = answer.get("kv_transfer_params") if isinstance(answer, dict) else None
        return params if isinstance(params, dict) and params else None
