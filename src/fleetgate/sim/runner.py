"""Run a simulator on a host and port from async code (tests, ``fleetgate up``, benchmarks)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from fleetgate.sim.app import create_sim_app
from fleetgate.sim.config import SimConfig

__all__ = ["running_sim", "start_sim"]


async def start_sim(
    config: SimConfig, *, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, str]:
    """Start serving; returns the runner (call ``await runner.cleanup()``) and the base URL.

    ``port=0`` picks a free port; the base URL has no trailing slash and no ``/v1``.
    """
    runner = web.AppRunner(
        create_sim_app(config),
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=1.0,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        bound = runner.addresses[0]
    except BaseException:
        await runner.cleanup()
        raise
    return runner, f"http://{host}:{bound[1]}"


@asynccontextmanager
async def running_sim(
    config: SimConfig | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve a simulator for the ``async with`` block and yield its base URL.

    Example::

        async with running_sim(SimConfig(mode="echo"), port=0) as base_url:
            client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="x")
    """
    runner, base_url = await start_sim(config or SimConfig(), host=host, port=port)
    try:
        yield base_url
    finally:
        await runner.cleanup()
