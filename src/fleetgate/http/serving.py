"""`served`: an aiohttp application on a free 127.0.0.1 port for the length of a block (tests,
benchmarks, in-process gateways); `fleetgate serve` has its own server loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

__all__ = ["served"]


@asynccontextmanager
async def served(app: web.Application, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``app`` on a free port of ``host``; yields its base URL (no trailing slash)."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, 0)
        await site.start()
        yield f"http://{host}:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
