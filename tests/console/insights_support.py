"""A console with insights on: the test config, teams with and without payload logging, and
requests sampled into the review queue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.config.schema import GatewayConfig
from tests.console.support import MASTER, Console, console_config, running_console

__all__ = ["InsightsConsole", "insights_console"]


def insights_config(upstream: str) -> GatewayConfig:
    raw = console_config(upstream).model_dump(mode="json", exclude_unset=True)
    raw["insights"] = {
        "flush_interval_s": 0.05,
        "report_cache_s": 0,  # each page sees the requests just made
        "review_share": {"tiny": 1.0},  # every request of `tiny` from a team that logs payloads
        "plans": {"teams": {}},
        "revenue_usd_month": {"paid": 20},
    }
    return GatewayConfig.model_validate(raw)


@dataclass
class InsightsConsole:
    console: Console
    loud: dict[str, Any]  # a team that logs payloads, its user key and team admin key
    quiet: dict[str, Any]  # one that does not

    async def chat(self, key: str, user: str, text: str, session: str = "s1") -> str:
        body = {"model": "tiny", "user": user, "messages": [{"role": "user", "content": text}]}
        headers = {"Authorization": f"Bearer {key}", "x-session-id": session}
        c = self.console
        async with c.http.post(c.url + "/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200, await r.text()
            return r.headers["x-request-id"]

    async def review_items(self, n: int) -> list[dict[str, Any]]:
        """The review queue once it holds ``n`` items (the writer flushes every 50 ms)."""
        for _ in range(100):
            status, body = await self.console.admin("GET", "/admin/insights/reviews?limit=500")
            assert status == 200, body
            if len(body["data"]) >= n:
                return list(body["data"])
            await asyncio.sleep(0.1)
        raise AssertionError(f"fewer than {n} review items")


async def _team(console: Console, name: str, log_payloads: bool) -> dict[str, Any]:
    status, team = await console.admin(
        "POST", "/admin/teams", json={"name": name, "log_payloads": log_payloads}
    )
    assert status == 201, team
    out = {"id": team["id"], "name": name}
    for role in ("user", "team_admin"):
        status, key = await console.admin(
            "POST", "/admin/keys", json={"team": team["id"], "role": role}
        )
        assert status == 201, key
        out[role] = key["key"]
    return out


@asynccontextmanager
async def insights_console(
    upstream: str, data_dir: Path, database_url: str | None = None
) -> AsyncIterator[InsightsConsole]:
    async with running_console(
        upstream, data_dir, database_url, config=insights_config(upstream)
    ) as console:
        loud = await _team(console, "loud", True)
        quiet = await _team(console, "quiet", False)
        yield InsightsConsole(console, loud, quiet)


__all__ += ["MASTER", "insights_config"]
