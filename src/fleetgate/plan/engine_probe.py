"""Measure one engine's prefill and decode speed (`EngineSpeed`) through its OpenAI API.

Against one idle engine (vLLM or ``fleetgate sim``), with prompts of random words so the
prefix cache never helps:

- **prefill**: the latency of a ``max_tokens: 1`` completion of a long prompt less that of a
  short one, over their difference in prompt tokens (``usage.prompt_tokens``); median of
  ``repeats`` pairs;
- **decode step**: one streamed completion of ``steps`` tokens (``ignore_eos``): the time from
  its first to its last token over ``steps - 1``;
- **batch factor**: ``batch`` such streams at once: ``(t_batch / t_1 - 1) / (batch - 1)``;
- **request overhead**: the latency of the short ``max_tokens: 1`` completion (HTTP, parsing,
  scheduling: what a request costs beyond its prefill).

Example::

    speed = await probe_engine("http://10.0.0.5:8000/v1", "llama", long_tokens=4000)
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from typing import Any

import aiohttp

from fleetgate.errors import UpstreamError
from fleetgate.plan.pd import EngineSpeed

__all__ = ["probe_engine"]


def _words(n: int, rng: random.Random) -> str:
    return " ".join(f"p{rng.randrange(1 << 30):x}" for _ in range(max(1, n)))


async def _complete(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[float, int]:
    started = time.perf_counter()
    async with http.post(f"{url}/completions", json=body) as resp:
        answer = await resp.json(content_type=None)
        if resp.status != 200:
            raise UpstreamError(f"the engine answered {resp.status}: {str(answer)[:200]}")
    return time.perf_counter() - started, int(answer["usage"]["prompt_tokens"])


async def _stream_step_s(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> float:
    """Seconds per token between the first and the last streamed token."""
    stamps: list[float] = []
    async with http.post(f"{url}/completions", json=body) as resp:
        if resp.status != 200:
            raise UpstreamError(f"the engine answered {resp.status}")
        async for line in resp.content:
            if not line.startswith(b"data: {"):
                continue
            choices = json.loads(line[6:]).get("choices") or []
            if choices and choices[0].get("text"):
                stamps.append(time.perf_counter())
    if len(stamps) < 2:
        raise UpstreamError("the engine streamed fewer than two tokens")
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


async def probe_engine(
    url: str,
    model: str,
    *,
    api_key: str | None = None,
    long_tokens: int = 4000,
    steps: int = 32,
    batch: int = 32,
    repeats: int = 3,
    seed: int = 0,
) -> EngineSpeed:
    """Measure the engine at ``url`` (its ``/v1`` base) serving ``model``; see the module."""
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as http:
        per_token, short_s = [], []
        for _ in range(repeats):
            short = {"model": model, "prompt": _words(8, rng), "max_tokens": 1}
            long = {"model": model, "prompt": _words(long_tokens // 2, rng), "max_tokens": 1}
            s_time, s_tokens = await _complete(http, url, short)
            short_s.append(s_time)
            l_time, l_tokens = await _complete(http, url, long)
            if l_tokens > s_tokens:
                per_token.append(max(0.0, l_time - s_time) / (l_tokens - s_tokens))
        if not per_token:
            raise UpstreamError("the long prompt was not longer than the short one")

        def stream() -> dict[str, Any]:
            return {"model": model, "prompt": _words(8, rng), "max_tokens": steps,
                    "ignore_eos": True, "stream": True}  # fmt: skip

        one = statistics.median([await _stream_step_s(http, url, stream()) for _ in range(2)])
        many = await asyncio.gather(*(_stream_step_s(http, url, stream()) for _ in range(batch)))
    factor = max(0.0, (statistics.median(many) / one - 1.0) / (batch - 1)) if batch > 1 else 0.0
    return EngineSpeed(
        prefill_ms_per_token=statistics.median(per_token) * 1000.0,
        decode_ms_per_step=one * 1000.0,
        decode_batch_factor=factor,
        request_overhead_ms=statistics.median(short_s) * 1000.0,
    )
