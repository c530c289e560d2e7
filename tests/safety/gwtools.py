"""Helpers for the safety tests that go through a real gateway."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp.test_utils import TestClient

from tests.conftest import AUTH

T = TypeVar("T")


def gateway_config(
    upstream_url: str,
    safety: dict[str, Any],
    *,
    aliases: tuple[str, ...] = ("tiny",),
    tenancy: bool = True,
) -> dict[str, Any]:
    """One alias per name, all on ``upstream_url``, with a ``safety:`` section."""
    models = [
        {
            "alias": a,
            "deployments": [{"provider": "openai", "model": "tiny", "api_base": upstream_url}],
        }
        for a in aliases
    ]
    return {
        "models": models,
        "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01},
        "tenancy": {"enabled": tenancy, "spend_flush_interval_s": 0.05, "poll_interval_s": 0.1},
        "multimodal": {"enabled": False},
        "safety": safety,
    }


def chat(text: str, model: str = "tiny", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout: float = 10.0, what: str = "condition"
) -> T:
    """Poll ``probe`` until it returns something truthy (bounded in time)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s (last: {value!r})")
        await asyncio.sleep(0.05)


async def audit_rows(client: TestClient[Any, Any], **query: str) -> list[dict[str, Any]]:
    resp = await client.get("/admin/safety/audit", params=query, headers=AUTH)
    assert resp.status == 200, await resp.text()
    rows: list[dict[str, Any]] = (await resp.json())["data"]
    return rows


async def metrics_text(client: TestClient[Any, Any]) -> str:
    resp = await client.get("/metrics")
    return await resp.text()
