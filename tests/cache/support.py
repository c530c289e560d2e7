"""Gateways with response caches for the cache tests: teams, keys, requests, SSE."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer

from fleetgate.app import build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.settings import Settings
from fleetgate.resources.minilm import MiniLM
from tests.conftest import AUTH, MASTER
from tests.fakes import FakeUpstream

PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}


def cache_config(up: FakeUpstream, cache: dict[str, Any], **extra: Any) -> dict[str, Any]:
    deployment = {"provider": "openai", "model": "up-model", "api_base": up.url, "price": PRICE}
    return {
        "models": [{"alias": "tiny", "deployments": [deployment], "cache": cache}],
        "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01},
        "health": {"probe_interval_s": 30},
        "tenancy": {"spend_flush_interval_s": 0.05},
        **extra,
    }


@asynccontextmanager
async def cache_gateway(
    config: dict[str, Any],
    data_dir: Path,
    *,
    minilm: MiniLM | None = None,
    redis_url: str | None = None,
) -> AsyncIterator[TestClient[Any, Any]]:
    """An in-process gateway; ``minilm``: a loader already warm (one per test module)."""
    settings = Settings(
        master_key=MASTER, data_dir=data_dir, watch_config=False, redis_url=redis_url
    )
    state = build_state(settings, parse_config(config))
    if minilm is not None:
        state.resources.minilm = minilm
    app = create_app(settings, state=state)
    client: TestClient[Any, Any] = TestClient(TestServer(app, handler_cancellation=True))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def team_key(client: TestClient[Any, Any], name: str) -> str:
    resp = await client.post("/admin/teams", json={"name": name}, headers=AUTH)
    assert resp.status == 201, await resp.text()
    team = await resp.json()
    resp = await client.post("/admin/keys", json={"team": team["id"]}, headers=AUTH)
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["key"])


def chat(content: str, **fields: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": content}], **fields}


async def ask(
    client: TestClient[Any, Any], key: str, body: dict[str, Any]
) -> tuple[int, str | None, dict[str, Any]]:
    """(status, the cache header, the JSON body)."""
    resp = await client.post(
        "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    return resp.status, resp.headers.get("x-fleetgate-cache"), await resp.json()


async def ask_stream(
    client: TestClient[Any, Any], key: str, body: dict[str, Any]
) -> tuple[str | None, list[dict[str, Any]], bool]:
    """(the cache header, the decoded chunks, whether it ended with [DONE])."""
    resp = await client.post(
        "/v1/chat/completions",
        json={**body, "stream": True},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    raw = (await resp.read()).decode()
    events = [e[len("data: ") :] for e in raw.split("\n\n") if e.startswith("data: ")]
    done = bool(events) and events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events if e != "[DONE]"]
    return resp.headers.get("x-fleetgate-cache"), chunks, done


def streamed_text(chunks: list[dict[str, Any]]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )


async def spend_by_deployment(client: TestClient[Any, Any], want: int) -> dict[str, Any]:
    """``/admin/spend`` grouped by deployment once ``want`` requests are recorded (bounded)."""
    for _ in range(100):
        resp = await client.get("/admin/spend?group_by=deployment", headers=AUTH)
        rows = (await resp.json())["data"]
        if sum(r["requests"] for r in rows) >= want:
            return {r["deployment"]: r for r in rows}
        await asyncio.sleep(0.05)
    raise AssertionError(f"spend records not written: {rows}")
