"""Encoder pools: a request's images are encoded on an encoder engine first (vLLM's encoder
disaggregation, "EPD"), then the request goes to the language-model engines.

An alias's deployments tagged ``encoder`` are its encoder pool (vLLM instances started with
``--ec-transfer-config '{"ec_connector": ..., "ec_role": "ec_producer"}'``); its other
deployments are the language-model pool (``ec_role: ec_consumer``), which alone serve the
requests, whatever the alias's strategy. For a chat request with ``image_url`` parts and a
healthy encoder engine, `EncoderStep.run` does what vLLM's example proxy
(``examples/online_serving/disaggregated_encoder/disagg_epd_proxy.py``) does:

1. one request per image to the encoder engine, with all text removed::

       {"model": ..., "messages": [{"role": "user", "content": [<the image_url part>]}],
        "max_tokens": 1, "stream": false}

   sent concurrently; every one must answer 200. The engine is the one the request's dispatch
   hooks prefer (image affinity: the encoder that recently encoded these images), else the
   least loaded; the hooks' admission (the image compute budget) is held on it while it
   encodes.
2. the original request to the language-model pool. Network EC connectors answer
   ``ec_transfer_params`` keyed by the image's mm hash; they are merged and sent along
   (``ec_transfer_params`` on the request; of a pd-disagg alias on its prefill request only,
   the decode engine gets the images' KV with the prompt's); with the
   shared-storage connector there are none and the engine finds the outputs by hash. The hooks
   that did encoder work (``encoder_work = True``: the image budget and affinity) are not
   applied again there.

Served aggregated instead (the language-model engine encodes the images itself): an encoder
pool with no healthy engine, or an encoder request that failed (the engine is cooled down as
after any upstream failure). ``fleetgate_encoder_requests_total{alias, mode}`` counts
``disaggregated``, ``aggregated-encoder-down`` and ``aggregated-encoder-failed``.

Example::

    step = EncoderStep(http, registry)
    lm_hooks = await step.run(route.name, encoders, ctx, hooks, health)
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

import aiohttp

from fleetgate.contract.dispatch import DispatchHook, preferred
from fleetgate.errors import UpstreamConnectError, UpstreamError, UpstreamStatusError
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.context import RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.health import HealthTracker
from fleetgate.telemetry.registry import Registry

__all__ = ["ENCODER_TAG", "EncoderStep", "image_items"]

ENCODER_TAG = "encoder"


def image_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``image_url`` part of the request's messages, in order (vLLM's proxy sends each
    to the encoder on its own)."""
    items: list[dict[str, Any]] = []
    messages = body.get("messages")
    if not isinstance(messages, list):
        return items
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            items += [p for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    return items


def lm_hooks(hooks: Sequence[DispatchHook[Deployment]]) -> list[DispatchHook[Deployment]]:
    """The hooks that still apply to the language-model call once the encoder did its work."""
    return [h for h in hooks if not getattr(h, "encoder_work", False)]


class EncoderStep:
    """Runs the encoder half of a request on an alias's encoder pool; see the module docstring."""

    def __init__(
        self,
        http: OutboundHttp,
        registry: Registry | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.http = http
        self.rng = rng or random.Random()
        registry = registry or Registry()
        self._requests = registry.counter(
            "fleetgate_encoder_requests_total",
            "Image requests of aliases with an encoder pool, by how they were served "
            "(disaggregated, or aggregated and why)",
            ["alias", "mode"],
        )

    async def run(
        self,
        alias: str,
        encoders: Sequence[Deployment],
        ctx: RouteContext,
        hooks: Sequence[DispatchHook[Deployment]],
        health: HealthTracker,
    ) -> Sequence[DispatchHook[Deployment]]:
        """Encode the request's images on the pool; the hooks left for the language-model call
        (all of them when it was served aggregated, or has no images)."""
        ctx.ec_transfer = None
        items = image_items(ctx.request.body)
        if not items:
            return hooks
        now = time.monotonic()
        pool = [d for d in encoders if d.state.healthy(now)]
        if not pool:
            self._requests.labels(alias, "aggregated-encoder-down").inc()
            return hooks
        dep = self._choose(preferred(hooks, pool))
        dep.state.in_flight += 1
        try:
            async with AsyncExitStack() as stack:
                for hook in hooks:
                    if getattr(hook, "encoder_work", False):  # the image budget, on the encoder
                        await stack.enter_async_context(hook.admit(dep))
                answers = await asyncio.gather(*(self._encode(dep, item) for item in items))
        except UpstreamError as exc:
            health.failure(dep, exc)
            self._requests.labels(alias, "aggregated-encoder-failed").inc()
            return hooks
        finally:
            dep.state.in_flight -= 1
        health.success(dep)
        dep.state.requests += 1
        params: dict[str, Any] = {}
        for answer in answers:
            params.update(answer)
        ctx.ec_transfer = params
        self._requests.labels(alias, "disaggregated").inc()
        return lm_hooks(hooks)

    def _choose(self, pool: Sequence[Deployment]) -> Deployment:
        """The least loaded engine (ties at random)."""
        least = min(d.state.in_flight for d in pool)
        return self.rng.choice([d for d in pool if d.state.in_flight == least])

    async def _encode(self, dep: Deployment, item: dict[str, Any]) -> dict[str, Any]:
        """One image on ``dep``; its ``ec_transfer_params`` (empty: a connector without)."""
        cfg = dep.config
        body = {"model": cfg.model, "messages": [{"role": "user", "content": [item]}],
                "max_tokens": 1, "stream": False}  # fmt: skip
        headers = dict(cfg.extra_headers)
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        total = cfg.timeouts.first_token if cfg.timeouts is not None else 60.0
        try:
            async with self.http.session().post(
                f"{cfg.api_base}/chat/completions",
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=total),
            ) as resp:
                if resp.status != 200:
                    detail = (await resp.read())[:200].decode(errors="replace")
                    raise UpstreamStatusError(
                        f"encoder {dep.id} answered {resp.status}: {detail}",
                        upstream_status=resp.status,
                    )
                answer = await resp.json(content_type=None)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise UpstreamConnectError(f"encoder {dep.id}: {type(exc).__name__}") from exc
        params = answer.get("ec_transfer_params") if isinstance(answer, dict) else None
        return params if isinstance(params, dict) else {}
