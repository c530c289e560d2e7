"""Stored responses through real gateways: per-tenant isolation, ``store: false``,
retention and purge, input items, and replicas sharing one PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, select

from fleetgate.api.responses.feature import ResponsesFeature
from fleetgate.api.responses.tables import responses
from fleetgate.api.state import GATEWAY
from fleetgate.app import build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.settings import Settings
from tests.api.responses.support import alias_config, create, sdk_for, team_key
from tests.conftest import MASTER, GatewayFactory
from tests.fakes import FakeUpstream


async def test_a_tenant_cannot_read_delete_or_continue_another_tenants_response(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(alias_config("tiny", {"model": "up", "api_base": upstream.url}))
    a, b = (
        sdk_for(client, await team_key(client, "a")),
        sdk_for(client, await team_key(client, "b")),
    )
    mine = await a.responses.create(model="tiny", input="a secret plan")
    with pytest.raises(openai.NotFoundError):
        await b.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError) as refused:
        await b.responses.create(model="tiny", input="go on", previous_response_id=mine.id)
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        await b.responses.delete(mine.id)
    assert len(upstream.seen) == 1  # B's continuation never reached the upstream
    assert (await a.responses.retrieve(mine.id)).output_text == "Hello there."
    go_on = await a.responses.create(model="tiny", input="go on", previous_response_id=mine.id)
    assert go_on.status == "completed"
    assert [m["content"] for m in upstream.seen[-1].body["messages"]] == [
        "a secret plan", "Hello there.", "go on"
    ]  # fmt: skip
    await a.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        await a.responses.retrieve(mine.id)
    unstored = await a.responses.create(model="tiny", input="forget me", store=False)
    with pytest.raises(openai.NotFoundError):
        await a.responses.retrieve(unstored.id)
    await a.close()
    await b.close()


async def test_retention_expires_and_purges_stored_responses(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    cfg = alias_config(
        "tiny", {"model": "up", "api_base": upstream.url},
        responses={"retention_s": 0.5, "purge_interval_s": 0.1},
    )  # fmt: skip
    client = await gateway(cfg)
    sdk = sdk_for(client)
    made = await sdk.responses.create(model="tiny", input="short-lived")
    assert (await sdk.responses.retrieve(made.id)).id == made.id
    feature = next(f for f in client.server.app[GATEWAY].features.all if f.name == "responses")
    assert isinstance(feature, ResponsesFeature)
    store = feature.store
    async with store.db.engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(responses)) == 1
    for _ in range(50):  # the purge runs every 0.1 s once the response expired
        await asyncio.sleep(0.1)
        async with store.db.engine.connect() as conn:
            if not await conn.scalar(select(func.count()).select_from(responses)):
                break
    else:
        raise AssertionError("the expired response was not purged")
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.retrieve(made.id)
    await sdk.close()


async def test_input_items_are_listed_for_the_owner(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(alias_config("tiny", {"model": "up", "api_base": upstream.url}))
    sdk = sdk_for(client)
    made = await sdk.responses.create(
        model="tiny", instructions="Be brief.",
        input=[
            {"role": "user", "content": "What is 2+2?"},
            {"type": "message", "role": "assistant", "id": "msg_prior",
             "content": [{"type": "output_text", "text": "4", "annotations": []}]},
            {"type": "function_call", "call_id": "c1", "name": "calc", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "4"},
            {"role": "user", "content": [{"type": "input_text", "text": "Sure?"}]},
        ],
    )  # fmt: skip
    listed = await sdk.responses.input_items.list(made.id, order="asc")
    kinds = [(i.type, getattr(i, "role", None)) for i in listed.data]
    assert kinds == [
        ("message", "user"), ("message", "assistant"), ("function_call", None),
        ("function_call_output", None), ("message", "user"),
    ]  # fmt: skip
    assert listed.data[1].id == "msg_prior" and len({i.id for i in listed.data}) == 5
    assert listed.data[0].content[0].text == "What is 2+2?"  # type: ignore[union-attr]
    newest = await sdk.responses.input_items.list(made.id, limit=2)  # desc by default
    assert [i.id for i in newest.data] == [listed.data[4].id, listed.data[3].id]
    assert newest.has_more is True
    rest = await sdk.responses.input_items.list(made.id, limit=10, after=newest.data[-1].id)
    assert [i.id for i in rest.data] == [i.id for i in listed.data[:3]][::-1]
    with pytest.raises(openai.BadRequestError):
        await sdk.responses.input_items.list(made.id, limit=0)
    other = sdk_for(client, await team_key(client, "other"))
    with pytest.raises(openai.NotFoundError):
        await other.responses.input_items.list(made.id)
    await other.close()
    await sdk.close()


async def test_any_replica_continues_a_response_another_one_stored(
    tmp_path: Path, shared_pg_url: str, upstream: FakeUpstream
) -> None:
    """Two gateways on one PostgreSQL: a stream stored by one is continued, read and deleted
    through the other as soon as its last event was read."""
    cfg = parse_config(alias_config("tiny", {"model": "up", "api_base": upstream.url}))
    clients = []
    for i in range(2):
        settings = Settings(master_key=MASTER, data_dir=tmp_path / f"r{i}",
                            database_url=shared_pg_url, watch_config=False)  # fmt: skip
        state = build_state(settings, cfg)
        client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings, state=state)))
        await client.start_server()
        clients.append(client)
    try:
        one, two = sdk_for(clients[0]), sdk_for(clients[1])
        first = await create(one, True, model="tiny", input="remember: 42")
        second = await two.responses.create(
            model="tiny", input="what was it?", previous_response_id=first.id
        )
        assert [m["content"] for m in upstream.seen[-1].body["messages"]] == [
            "remember: 42", "Hello there.", "what was it?"
        ]  # fmt: skip
        assert (await one.responses.retrieve(second.id)).previous_response_id == first.id
        await two.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            await one.responses.retrieve(first.id)
        await one.close()
        await two.close()
    finally:
        for client in clients:
            await client.close()
