"""Load of the scheduling benchmark: streamed chat requests, open and closed loop, bounded.

Every loop ends at its deadline (and every request after ``REQUEST_TIMEOUT_S``); a request
refused by the gateway (429/503) is recorded and its loop waits ``Retry-After`` (at most a
second) before sending again, so a closed loop never spins.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass

import aiohttp
import orjson

REQUEST_TIMEOUT_S = 60.0
MAX_TOKENS = 24
WORDS = 30  # about 40 prompt tokens


@dataclass
class Sample:
    team: str
    sent: float  # time.monotonic()
    ended: float
    status: int
    ttft: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    request_id: str | None = None  # the gateway's x-request-id (joins the engine's timings)
    cut: bool = False  # the stream ended with an error event (e.g. preempted_in_flight)
    url: str = ""  # the gateway it was sent to


def _body() -> dict[str, object]:
    words = " ".join(os.urandom(3).hex() for _ in range(WORDS))  # no shared prefix
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": words}],
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_one(
    session: aiohttp.ClientSession, url: str, team: str, key: str, out: list[Sample]
) -> Sample:
    """One streamed request; its sample is appended to ``out``."""
    sent = time.monotonic()
    sample = Sample(team, sent, sent, 0, url=url)
    headers = {"Authorization": f"Bearer {key}"}
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    try:
        async with session.post(
            f"{url}/v1/chat/completions", json=_body(), headers=headers, timeout=timeout
        ) as resp:
            sample.status = resp.status
            sample.request_id = resp.headers.get("x-request-id")
            if resp.status != 200:
                await resp.read()
                retry = resp.headers.get("Retry-After", "1")
                sample.ttft = float(retry) if retry.isdigit() else 1.0  # kept for the loop
            else:
                async for line in resp.content:
                    if not line.startswith(b"data: {"):
                        continue
                    if line.startswith(b'data: {"error"'):
                        sample.cut = True
                    if sample.ttft is None and b'"content":"' in line:
                        sample.ttft = time.monotonic() - sent
                    if b'"usage":{' in line:
                        usage = orjson.loads(line[6:]).get("usage") or {}
                        sample.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                        sample.completion_tokens = int(usage.get("completion_tokens") or 0)
    except (aiohttp.ClientError, TimeoutError):
        sample.status = -1
    sample.ended = time.monotonic()
    out.append(sample)
    return sample


async def closed_loop(
    session: aiohttp.ClientSession,
    url: str,
    team: str,
    key: str,
    concurrency: int,
    until: float,
    out: list[Sample],
) -> None:
    """``concurrency`` requests outstanding until ``until`` (time.monotonic())."""

    async def worker() -> None:
        while time.monotonic() < until:
            sample = await stream_one(session, url, team, key, out)
            if sample.status != 200:
                await asyncio.sleep(min(1.0, sample.ttft or 0.1))

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def poisson(
    session: aiohttp.ClientSession,
    url: str,
    team: str,
    key: str,
    rate: float,
    until: float,
    out: list[Sample],
    seed: int,
) -> None:
    """Requests at ``rate`` per second (exponential gaps) until ``until``; waits for them."""
    rng = random.Random(seed)
    tasks: list[asyncio.Task[Sample]] = []
    next_at = time.monotonic()
    while True:
        next_at += rng.expovariate(rate)
        if next_at >= until:
            break
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        tasks.append(asyncio.create_task(stream_one(session, url, team, key, out)))
    await asyncio.gather(*tasks)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
