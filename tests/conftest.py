from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from fleetgate.app import build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.settings import Settings
from fleetgate.contract.stages import Stage
from fleetgate.feature import Feature, StageFeature
from fleetgate.routing.semantic_feature import SemanticFeature
from fleetgate.routing.semantic_stage import SemanticStage
from tests.fakes import FakeUpstream
from tests.ordering import pytest_collection_modifyitems  # noqa: F401 (slowest files first)
from tests.vllm_engines import vllm_engines, vllm_kv_events, vllm_pair  # noqa: F401 (the session's vLLM pair)

MASTER = "sk-test-master"
AUTH = {"Authorization": f"Bearer {MASTER}"}

GatewayFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


def one_alias(*upstreams: FakeUpstream, alias: str = "tiny", **extra: Any) -> dict[str, Any]:
    deployments = [
        {"provider": "openai", "model": "up-model", "api_base": u.url, "name": u.name}
        for u in upstreams
    ]
    return {
        "models": [{"alias": alias, "deployments": deployments, **extra}],
        "router": {"retry_backoff_s": 0.001, "retry_backoff_max_s": 0.01},
    }


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream("a") as up:
        yield up


@pytest.fixture
async def upstream_b() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream("b") as up:
        yield up


def _as_feature(stage: Stage) -> Feature:
    """A test's stage as a feature (a semantic router replaces the configured one)."""
    if isinstance(stage, SemanticStage):
        return SemanticFeature(stage)
    return StageFeature(stage)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayFactory]:
    """Start an in-process gateway for a config dict; returns a test client."""
    clients: list[TestClient[Any, Any]] = []

    async def make(
        config: dict[str, Any], stages: Sequence[Stage] = (), **settings: Any
    ) -> TestClient[Any, Any]:
        opts: dict[str, Any] = {"master_key": MASTER, "data_dir": tmp_path, "watch_config": False}
        opts.update(settings)
        state = build_state(Settings(**opts), parse_config(config))
        app = create_app(state.settings, state=state, extra=[_as_feature(s) for s in stages])
        client: TestClient[Any, Any] = TestClient(TestServer(app, handler_cancellation=True))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest) -> AsyncIterator[str | None]:
    """The gateway's default SQLite file, or a fresh PostgreSQL database (which, unlike SQLite,
    refuses values longer than their column, NUL characters and integers past the column)."""
    from tests.tenancy.support import database_for

    async with database_for(request.param, None) as url:
        yield url


@pytest.fixture
def shared_pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for gateway processes to share (dropped afterwards)."""
    from tests.tenancy.support import create_pg_database, drop_pg_database

    url = asyncio.run(create_pg_database())
    yield url
    asyncio.run(drop_pg_database(url))
