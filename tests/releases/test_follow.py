"""Aliases that follow a registry stage: every replica serves a promotion within a second,
without a config edit; ``alias@version`` reaches one version; rollback in one call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fleetgate.sim.config import SimConfig
from fleetgate.sim.runner import running_sim
from tests.releases.support import Gateway, registry_config, running_gateway, version_body


@pytest.fixture
async def sim() -> AsyncIterator[str]:
    async with running_sim(SimConfig(model="tiny", mode="echo")) as url:
        yield url


async def served_by(gw: Gateway, alias: str = "chat") -> str:
    status, deployment, body = await gw.chat(alias)
    return deployment if status == 200 else f"{status}:{body['error']['code']}"


async def until_served(gw: Gateway, want: str, timeout: float = 1.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if await served_by(gw) == want:
            return time.monotonic() - start
        await asyncio.sleep(0.02)
    raise AssertionError(f"{gw.url} still serves {await served_by(gw)!r}, not {want!r}")


async def test_promotion_reaches_every_replica_within_a_second(
    sim: str, db_url: str, tmp_path: Path
) -> None:
    cfg = registry_config(sim)
    async with (
        running_gateway(cfg, tmp_path / "a", db_url) as a,
        running_gateway(cfg, tmp_path / "b", db_url) as b,
    ):
        # nothing at production yet: the alias exists but has nowhere to go
        assert (await served_by(a)).startswith("503")
        assert (await a.admin("POST", "/admin/registry/models", json={"name": "chat"}))[0] == 201
        for n in (1, 2):
            status, body = await a.admin(
                "POST", "/admin/registry/models/chat/versions", json=version_body(sim, n)
            )
            assert status == 201 and body["version"] == f"v{n}", body
        status, body = await a.admin(
            "POST", "/admin/registry/models/chat/promote",
            json={"stage": "production", "version": "v1"},
        )  # fmt: skip
        assert status == 200, body
        for gw in (a, b):
            await until_served(gw, "chat-v1")
        # the version label follows the registry version
        assert {d.version for d in a.state.tables.table.route("chat").deployments} == {"v1"}
        # a promotion seen by the other replica within a second (poll 0.2 s)
        await a.admin("POST", "/admin/registry/models/chat/promote",
                      json={"stage": "production", "version": "v2"})  # fmt: skip
        assert await until_served(b, "chat-v2") < 1.0
        assert await served_by(a) == "chat-v2"
        # pinned aliases reach one version whatever the stage says
        assert await served_by(b, "chat@v1") == "chat-v1"
        # rollback: one call, every replica back on v1
        status, body = await b.admin("POST", "/admin/registry/models/chat/rollback")
        assert status == 200, body
        assert body["moves"][0] == {"stage": "production", "from_version": "v2",
                                    "to_version": "v1"}  # fmt: skip
        for gw in (a, b):
            await until_served(gw, "chat-v1")
        status, history = await a.admin("GET", "/admin/registry/models/chat/history")
        assert [h["action"] for h in history["data"]] == ["rollback", "promote", "promote"]
        # a config reload keeps following the registry
        a.state.tables.apply(a.state.tables.source)
        assert await served_by(a) == "chat-v1"


async def test_two_clients_promoting_at_once_through_two_replicas(
    sim: str, db_url: str, tmp_path: Path
) -> None:
    """Two clients, each through its own replica, promote different versions at the same
    moment: both land one after the other (serialised), leaving exactly one production
    version and two history entries; with ``expected`` one of them gets a 409."""
    cfg = registry_config(sim)
    async with (
        running_gateway(cfg, tmp_path / "a", db_url) as a,
        running_gateway(cfg, tmp_path / "b", db_url) as b,
    ):
        await a.admin("POST", "/admin/registry/models", json={"name": "chat"})
        for n in (1, 2, 3, 4):
            await a.admin("POST", "/admin/registry/models/chat/versions", json=version_body(sim, n))
        promote = "/admin/registry/models/chat/promote"
        results = await asyncio.gather(
            a.admin("POST", promote, json={"stage": "production", "version": "v1"}),
            b.admin("POST", promote, json={"stage": "production", "version": "v2"}),
        )
        assert [status for status, _ in results] == [200, 200], results
        _, model = await a.admin("GET", "/admin/registry/models/chat")
        assert {model["stages"]["production"], model["stages"]["previous"]} == {"v1", "v2"}
        _, history = await a.admin("GET", "/admin/registry/models/chat/history")
        assert len(history["data"]) == 2
        production = model["stages"]["production"]
        for gw in (a, b):
            await until_served(gw, f"chat-{production}")
        # strict: both expect the current production; exactly one wins
        results = await asyncio.gather(
            a.admin("POST", promote, json={"stage": "production", "version": "v3",
                                           "expected": production}),
            b.admin("POST", promote, json={"stage": "production", "version": "v4",
                                           "expected": production}),
        )  # fmt: skip
        assert sorted(status for status, _ in results) == [200, 409], results
        _, history = await a.admin("GET", "/admin/registry/models/chat/history")
        assert len(history["data"]) == 3
