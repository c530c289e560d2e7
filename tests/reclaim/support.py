"""Shared pieces of the reclaim tests: fast windows, the simulator's sleep state, audit rows."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp

from fleetgate.sim import SimConfig, start_sim

BODY = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}

# A 1.5 s window sampled every 0.1 s (the defaults are 30 min and 5 s).
FAST: dict[str, Any] = {
    "below_util_pct": 20,
    "window_s": 1.5,
    "sample_interval_s": 0.1,
    "settle_s": 0.3,
    "activity_interval_s": 0.2,
    "lease_s": 3,
}
WAKE = {"hold_s": 10, "poll_interval_s": 0.1}


def deployment(name: str, sim: str, **extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "api_base": f"{sim}/v1", "name": name, "wake": WAKE, **extra}


async def is_sleeping(sim: str) -> bool:
    async with aiohttp.ClientSession() as s, s.get(f"{sim}/is_sleeping") as r:
        return bool((await r.json())["is_sleeping"])


async def until(check: Callable[[], Awaitable[bool]], limit_s: float, what: str) -> float:
    """Seconds until ``check()`` is true; fails after ``limit_s``."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > limit_s:
            raise AssertionError(f"not within {limit_s} s: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def reclaim_rows(rows: list[dict[str, Any]], action: str, pool: str) -> list[dict[str, Any]]:
    """The admin audit rows of ``reclaim.<action>`` on ``pool``."""
    return [r for r in rows if r["action"] == f"reclaim.{action}" and r["target"] == pool]


@contextmanager
def sim_thread(config: SimConfig) -> Iterator[str]:
    """The simulator on its own event loop in a thread of this process (no interpreter to
    start: a loaded machine takes longer than `tests.procs.sim_process` waits); its base URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="sim", daemon=True)
    thread.start()
    runner, url = asyncio.run_coroutine_threadsafe(start_sim(config), loop).result(30)
    try:
        yield url
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
