"""A gateway with the console on a free port (fake upstream, tenancy on SQLite or PostgreSQL)."""

from __future__ import annotations

import re
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
from fleetgate.console import ConsoleFeature
from tests.tenancy.support import MASTER, PRICE, served

__all__ = ["MASTER", "Console", "console_config", "running_console"]


def console_config(upstream: str, **console: Any) -> GatewayConfig:
    deployment = {"provider": "openai", "model": "tiny", "api_base": upstream}  # ends in /v1
    return GatewayConfig.model_validate({
        "models": [
            {"alias": "tiny", "deployments": [{**deployment, "price": PRICE, "version": "v1"},
                                              {**deployment, "price": PRICE, "version": "v2"}]},
            {"alias": "other", "deployments": [deployment]},
        ],
        "health": {"probe_interval_s": 30},
        "tenancy": {"spend_flush_interval_s": 0.05, "poll_interval_s": 0.2},
        "extensions": {"console": {"page_size": 10, **console}},
    })  # fmt: skip


@dataclass
class Console:
    url: str
    app: web.Application
    http: aiohttp.ClientSession  # no cookies of its own: each test signs in explicitly

    @property
    def gw(self) -> GatewayState:
        return self.app[GATEWAY]

    @property
    def feature(self) -> ConsoleFeature:
        return next(f for f in self.gw.features.all if isinstance(f, ConsoleFeature))

    async def open_sessions(self) -> int:
        return await self.feature.console.sessions.count()

    def at_own_url(self) -> None:
        """Point ``public_url`` at the address this test server got (known only once it
        listens), as an operator's config names the gateway's address."""
        cfg = self.feature.console.config
        self.feature.console.config = cfg.model_copy(update={"public_url": self.url})

    async def admin(
        self, method: str, path: str, key: str = MASTER, **kwargs: Any
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {key}"}
        async with self.http.request(method, self.url + path, headers=headers, **kwargs) as resp:
            return resp.status, await resp.json()

    async def team_and_key(self, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """Create team ``name`` and a key in it (as the master key); returns both as the admin
        API answered."""
        status, team = await self.admin("POST", "/admin/teams", json={"name": name})
        assert status == 201, team
        status, key = await self.admin("POST", "/admin/keys", json={"team": team["id"]})
        assert status == 201, key
        return team, key

    async def chat(self, key: str, alias: str = "tiny") -> int:
        body = {"model": alias, "messages": [{"role": "user", "content": "hi"}]}
        headers = {"Authorization": f"Bearer {key}"}
        async with self.http.post(
            self.url + "/v1/chat/completions", json=body, headers=headers
        ) as resp:
            await resp.read()
            return resp.status

    async def signed_in(self, key: str) -> aiohttp.ClientSession:
        """A client session signed in to the console with ``key`` (cookie jar kept)."""
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
        session = aiohttp.ClientSession(cookie_jar=jar)
        async with session.get(self.url + "/ui/login") as resp:
            token = csrf_of(await resp.text())
        async with session.post(
            self.url + "/ui/login", data={"key": key, "csrf": token}, allow_redirects=False
        ) as resp:
            assert resp.status == 302, await resp.text()
        return session


def csrf_of(html: str) -> str:
    """The CSRF token of the first form of a page."""
    match = re.search(r'name="csrf" value="([^"]+)"', html) or re.search(
        r'data-csrf="([^"]+)"', html
    )
    assert match is not None, "no CSRF token on the page"
    return match.group(1)


@asynccontextmanager
async def running_console(
    upstream: str,
    data_dir: Path,
    database_url: str | None = None,
    config: GatewayConfig | None = None,
    **console: Any,
) -> AsyncIterator[Console]:
    settings = Settings(
        master_key=MASTER, data_dir=data_dir, database_url=database_url, watch_config=False
    )
    app = create_app(settings, config or console_config(upstream, **console))
    async with served(app) as url, aiohttp.ClientSession() as http:
        yield Console(url, app, http)
