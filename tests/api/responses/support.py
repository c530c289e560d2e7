"""Helpers of the ``/v1/responses`` gateway tests."""

from __future__ import annotations

from typing import Any

import openai
from aiohttp.test_utils import TestClient

from tests.conftest import AUTH, MASTER

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "strict": False,
}


def alias_config(alias: str, dep: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "models": [{"alias": alias, "deployments": [dep]}],
        "multimodal": {"enabled": False},
        "tenancy": {"spend_flush_interval_s": 0.05},
        **extra,
    }


def sdk_for(client: TestClient[Any, Any], key: str = MASTER) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=key, max_retries=0)


async def create(sdk: openai.AsyncOpenAI, stream: bool, **kwargs: Any) -> Any:
    """One response, streamed (through the SDK's event accumulator) or not."""
    if not stream:
        return await sdk.responses.create(**kwargs)
    types = []
    async with sdk.responses.stream(**kwargs) as events:
        async for event in events:
            types.append(event.type)
        final = await events.get_final_response()
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert types[-1] == f"response.{final.status}"
    return final


async def team_key(client: TestClient[Any, Any], team: str) -> str:
    resp = await client.post("/admin/teams", json={"name": team}, headers=AUTH)
    team_id = (await resp.json())["id"]
    resp = await client.post("/admin/keys", json={"team": team_id}, headers=AUTH)
    return str((await resp.json())["key"])
