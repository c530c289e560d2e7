"""Gateways for the releases tests: real HTTP servers on 127.0.0.1 with a registry store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from fleetgate.api.state import GATEWAY, GatewayState
from fleetgate.app import create_app
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.releases.feature import ReleasesFeature
from tests.tenancy.support import served

MASTER = "sk-master-releases"


def registry_config(upstream: str, **releases: Any) -> dict[str, Any]:
    """``chat`` follows the registry's production stage; ``tiny`` is a plain alias."""
    return {
        "models": [
            {"alias": "chat", "registry": {"model": "chat", "stage": "production"}},
            {
                "alias": "tiny",
                "deployments": [{"model": "tiny", "api_base": f"{upstream}/v1"}],
            },
        ],
        "health": {"probe_interval_s": 30},
        "tenancy": {"enabled": False},
        "releases": {"poll_interval_s": 0.2, **releases},
    }


def version_body(upstream: str, n: int, **extra: Any) -> dict[str, Any]:
    return {
        "artifact_uri": f"s3://models/chat/{n}",
        "tokenizer": "tiny",
        "tensor_parallel": 1,
        "max_model_len": 4096,
        "deployments": [{"model": "tiny", "api_base": f"{upstream}/v1", "name": f"chat-v{n}"}],
        **extra,
    }


@dataclass
class Gateway:
    url: str
    app: web.Application
    session: aiohttp.ClientSession

    @property
    def state(self) -> GatewayState:
        return self.app[GATEWAY]

    @property
    def releases(self) -> ReleasesFeature:
        found = [f for f in self.state.features.all if isinstance(f, ReleasesFeature)]
        return found[0]

    async def admin(
        self, method: str, path: str, key: str = MASTER, **kwargs: Any
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {key}"}
        async with self.session.request(method, self.url + path, headers=headers, **kwargs) as resp:
            return resp.status, await resp.json(content_type=None)

    async def chat(self, alias: str = "chat", content: str = "hello") -> tuple[int, str, Any]:
        """(status, the deployment that answered, body)."""
        body = {"model": alias, "messages": [{"role": "user", "content": content}],
                "max_tokens": 8}  # fmt: skip
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with self.session.post(
            self.url + "/v1/chat/completions", json=body, headers=headers
        ) as resp:
            return resp.status, resp.headers.get("x-fleetgate-deployment", ""), await resp.json()


@asynccontextmanager
async def running_gateway(
    config: dict[str, Any], data_dir: Path, database_url: str | None
) -> AsyncIterator[Gateway]:
    settings = Settings(
        master_key=MASTER, data_dir=data_dir, database_url=database_url, watch_config=False
    )
    app = create_app(settings, GatewayConfig.model_validate(config))
    async with served(app) as url, aiohttp.ClientSession() as session:
        yield Gateway(url, app, session)
