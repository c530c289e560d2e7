"""Helpers of the batch lane tests: an in-process gateway over the simulator, JSONL files."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
from aiohttp import web

from fleetgate.api.state import GATEWAY
from fleetgate.app import create_app
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.store.database import Database
from tests.tenancy.support import served

MASTER = "sk-master-batches"
TERMINAL = {"completed", "failed", "cancelled", "expired"}


def config(upstream: str, batches: dict[str, Any] | None = None, **model: Any) -> dict[str, Any]:
    return {
        "models": [
            {
                "alias": "tiny",
                "deployments": [
                    {"provider": "openai", "model": "tiny", "api_base": f"{upstream}/v1",
                     "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0,
                               "batch_discount": 0.5}, **model}
                ],
            },
            {
                "alias": "hidden",
                "deployments": [
                    {"provider": "openai", "model": "tiny", "api_base": f"{upstream}/v1"}
                ],
            },
        ],
        "health": {"probe_interval_s": 30},
        "tenancy": {"spend_flush_interval_s": 0.05, "poll_interval_s": 0.2},
        "batches": {"tick_s": 0.1, "lease_s": 3.0, **(batches or {})},
    }  # fmt: skip


async def finished(client: openai.AsyncOpenAI, batch_id: str, timeout_s: float = 30.0) -> Any:
    """The batch once it has ended (completed, failed, cancelled or expired)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        batch = await client.batches.retrieve(batch_id)
        if batch.status in TERMINAL:
            return batch
        await asyncio.sleep(0.1)
    raise AssertionError(f"batch {batch_id} did not finish: {batch.status}")


def jsonl(rows: list[Any]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def chat_line(custom_id: str, alias: str = "tiny", text: str = "hello") -> dict[str, Any]:
    return {
        "custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": alias, "messages": [{"role": "user", "content": text}],
                 "max_tokens": 8},
    }  # fmt: skip


def records(content: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in content.splitlines() if line.strip()]


@dataclass
class Gateway:
    url: str
    app: web.Application
    session: aiohttp.ClientSession
    db_url: str
    clients: list[openai.AsyncOpenAI] = field(default_factory=list)

    def client(self, key: str) -> openai.AsyncOpenAI:
        """The official SDK against this gateway (closed with the gateway)."""
        client = openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)
        self.clients.append(client)
        return client

    async def team_key(self, name: str, **key_fields: Any) -> str:
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with self.session.post(
            f"{self.url}/admin/teams", json={"name": name}, headers=headers
        ) as resp:
            team = await resp.json()
            assert resp.status == 201, team
        async with self.session.post(
            f"{self.url}/admin/keys", json={"team": team["id"], **key_fields}, headers=headers
        ) as resp:
            key = await resp.json()
            assert resp.status == 201, key
        return str(key["key"])

    @property
    def db(self) -> Database:
        feature = next(f for f in self.app[GATEWAY].features.all if f.name == "batches")
        db: Database = feature.db  # type: ignore[attr-defined]
        return db


@asynccontextmanager
async def running_gateway(
    cfg: dict[str, Any], data_dir: Path, db_url: str | None = None
) -> AsyncIterator[Gateway]:
    db_url = db_url or f"sqlite:///{data_dir / 'fleetgate.db'}"
    settings = Settings(
        master_key=MASTER, data_dir=data_dir, database_url=db_url, watch_config=False
    )
    app = create_app(settings, GatewayConfig.model_validate(cfg))
    async with served(app) as url, aiohttp.ClientSession() as session:
        gateway = Gateway(url, app, session, db_url)
        try:
            yield gateway
        finally:
            for client in gateway.clients:
                await client.close()
