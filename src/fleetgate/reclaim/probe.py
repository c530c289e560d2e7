"""One utilisation sample of a pool: its GPUs (dcgm-exporter) or its engine's queue.

Example::

    probe = PoolProbe(http)
    await probe.dcgm_util(["http://gpu-node-1:9400/metrics"])   # 37.5 (mean %), None: unread
    await probe.engine_busy(dep)                                 # True, False, None: unread
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aiohttp

from fleetgate.cost.dcgm import parse_dcgm
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_metrics import parse_engine_metrics
from fleetgate.routing.wake import engine_root

__all__ = ["PoolProbe"]

_TIMEOUT = aiohttp.ClientTimeout(total=3.0)


class PoolProbe:
    """Reads the pool's exporters over the process's outbound session."""

    def __init__(self, http: OutboundHttp) -> None:
        self._http = http

    async def _text(self, url: str, headers: dict[str, str] | None = None) -> str | None:
        try:
            async with self._http.session().get(url, headers=headers, timeout=_TIMEOUT) as resp:
                if resp.status != 200:
                    return None
                return await resp.text()
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None

    async def dcgm_util(self, urls: Sequence[str]) -> float | None:
        """The mean GPU utilisation (%) over every GPU the exporters report; None: none read."""
        texts = await asyncio.gather(*(self._text(u) for u in urls))
        utils = [s.util_pct for t in texts if t for s in parse_dcgm(t) if s.util_pct is not None]
        return sum(utils) / len(utils) if utils else None

    async def engine_busy(self, dep: Deployment) -> bool | None:
        """Whether the engine has requests running or waiting (``/metrics``); None: unread."""
        key = dep.config.api_key
        headers = {"Authorization": f"Bearer {key}"} if key else None
        text = await self._text(f"{engine_root(dep.config.api_base)}/metrics", headers)
        if text is None:
            return None
        snap = parse_engine_metrics(text)
        return (snap.running + snap.waiting) > 0 if snap.known else None

    async def is_sleeping(self, dep: Deployment) -> bool | None:
        """``GET /is_sleeping``: True or False; None when the engine cannot be asked (an
        engine without sleep mode answers 404: awake)."""
        url = f"{engine_root(dep.config.api_base)}/is_sleeping"
        try:
            async with self._http.session().get(url, timeout=_TIMEOUT) as resp:
                if resp.status == 404:
                    return False
                if resp.status != 200:
                    return None
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return None
        return isinstance(body, dict) and body.get("is_sleeping") is True

    async def sleep(self, dep: Deployment, level: int) -> bool:
        """``POST /sleep?level=`` on the engine; True when it accepted."""
        url = f"{engine_root(dep.config.api_base)}/sleep"
        try:
            async with self._http.session().post(
                url, params={"level": str(level)}, timeout=_TIMEOUT
            ) as resp:
                await resp.read()
                return resp.status < 300
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False
