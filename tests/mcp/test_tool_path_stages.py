"""Tool calls pass the same stages as model calls, end to end: one key's rate limit and one
team's budget count both, both are refused with the same error body and audited in the same
row shape, the input checks stop blocked arguments and the output checks blocked answers, and
an abandoned tool call is settled at once (the official MCP client, a fake model upstream, the
MCP servers of tests/mcp/upstreams.py; tenancy on SQLite)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("mcp")  # the `mcp` extra

from mcp.shared.exceptions import MCPError
from sqlalchemy import select

from fleetgate.tenancy.tables import request_audit, safety_audit, spend
from tests.fakes import FakeUpstream
from tests.mcp.conftest import HttpUpstream, SharedGateway, StartGateway, mcp_client, mcp_section
from tests.mcp.upstreams import INJECTION
from tests.tenancy.support import REDIS_URL, Gateway, pg_database, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

# Every column but those that name the request itself.
_OWN = ("request_id", "created_ms", "alias", "prompt", "response")


async def _rows(gw: Gateway, table: Any, **where: Any) -> list[dict[str, Any]]:
    query = select(table)
    for column, value in where.items():
        query = query.where(table.c[column] == value)
    async with gw.tenancy.db.engine.connect() as conn:
        return [dict(r._mapping) for r in await conn.execute(query)]


async def _wait_rows(gw: Gateway, table: Any, n: int = 1, **where: Any) -> list[dict[str, Any]]:
    async def enough() -> bool:
        return len(await _rows(gw, table, **where)) >= n

    await wait_for(enough, timeout=10)
    return await _rows(gw, table, **where)


def _shape(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in _OWN}


async def _chat(gw: Gateway, key: str, text: str) -> tuple[int, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 8}
    headers = {"Authorization": f"Bearer {key}"}
    async with gw.session.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers) as r:
        return r.status, await r.json()


def _openai_error(exc: MCPError) -> dict[str, Any]:
    """The OpenAI error object a JSON-RPC error of the gateway carries in its data."""
    data = exc.error.data
    assert isinstance(data, dict)
    return {k: data[k] for k in ("message", "type", "param", "code")}


async def test_a_keys_rate_limit_counts_model_and_tool_calls_and_refuses_both_alike(
    notes: HttpUpstream, start_gateway: StartGateway
) -> None:
    async with FakeUpstream() as up:
        gw = await start_gateway(mcp_section(notes.url), models_url=up.url)
        _, key_id, key = await gw.team_and_key("research", rpm=2)
        assert (await _chat(gw, key, "hello"))[0] == 200  # 1 of 2 this minute
        async with mcp_client(gw.url, key) as client:
            assert not (await client.call_tool("notes__echo", {"text": "2 of 2"})).is_error
            with pytest.raises(MCPError) as limited:
                await client.call_tool("notes__echo", {"text": "one too many"})
        status, body = await _chat(gw, key, "one too many")
    assert status == 429
    error = _openai_error(limited.value)
    assert limited.value.error.code == -32011 and limited.value.error.message == error["message"]
    prefix = "Rate limit reached for key (requests); retry in "
    assert error["message"].startswith(prefix) and body["error"]["message"].startswith(prefix)
    without_delay = {k: v for k, v in error.items() if k != "message"}
    assert without_delay == {k: v for k, v in body["error"].items() if k != "message"}
    data = limited.value.error.data
    assert isinstance(data, dict) and data["status"] == 429 and data["reason"] == "requests"
    assert 0 < data["retry_after_s"] <= 60
    rows = await _wait_rows(gw, request_audit, 2, key_id=key_id, decision="refused_requests")
    by_alias = {r["alias"]: r for r in rows}
    tool, model = by_alias["mcp/notes"], by_alias["tiny"]
    assert _shape(tool) == _shape(model)  # one audit row shape, written by one stage
    assert tool["status"] == 429 and tool["error_type"] == "rate_limit_error"


@pytest_asyncio.fixture(loop_scope="module")
async def pg_url() -> AsyncIterator[str]:
    """A fresh database on the local PostgreSQL (dropped after the test's gateways closed)."""
    async with pg_database() as url:
        yield url


@pytest.mark.postgres
@pytest.mark.redis
async def test_one_limit_holds_for_tool_and_model_calls_across_two_replicas(
    notes: HttpUpstream, pg_url: str, start_gateway: StartGateway
) -> None:
    """Two replicas on one PostgreSQL database and one Redis: a key's RPM counts tool calls
    and model calls on either replica in the same shared counter."""
    prefix = f"fgtest:mcp-replicas:{os.getpid()}:{os.urandom(4).hex()}:"
    async with FakeUpstream() as up:
        shared = {"database_url": pg_url, "redis_url": REDIS_URL, "redis_prefix": prefix}
        a = await start_gateway(mcp_section(notes.url), models_url=up.url, replica="a", **shared)
        b = await start_gateway(mcp_section(notes.url), models_url=up.url, replica="b", **shared)
        _, key_id, key = await a.team_and_key("research", rpm=3)

        async def b_knows_the_key() -> bool:
            return b.tenancy.cache.entry(key_id) is not None

        await wait_for(b_knows_the_key, timeout=10)
        async with mcp_client(a.url, key) as on_a, mcp_client(b.url, key) as on_b:
            assert not (await on_a.call_tool("notes__echo", {"text": "1 on a"})).is_error
            assert (await _chat(b, key, "2 on b"))[0] == 200
            assert not (await on_b.call_tool("notes__echo", {"text": "3 on b"})).is_error
            for client in (on_a, on_b):
                with pytest.raises(MCPError) as limited:
                    await client.call_tool("notes__echo", {"text": "one too many"})
                assert limited.value.error.code == -32011
        assert (await _chat(a, key, "one too many"))[0] == 429


async def test_a_tool_calls_price_is_spent_from_the_budget_model_calls_spend(
    notes: HttpUpstream, start_gateway: StartGateway
) -> None:
    async with FakeUpstream() as up:
        gw = await start_gateway(mcp_section(notes.url), models_url=up.url)
        team_id, key_id, key = await gw.team_and_key(
            "budgeted", team_fields={"max_budget_usd": 0.01}
        )
        assert (await _chat(gw, key, "hello"))[0] == 200  # a fraction of a cent
        async with mcp_client(gw.url, key) as client:
            await client.call_tool("notes__add", {"a": 1, "b": 2})  # 0.0125 USD: spent
            for _ in range(50):  # bounded: the settle lands in the limiter in the background
                status, body = await _chat(gw, key, "more")
                if status == 429:
                    break
                await asyncio.sleep(0.1)
            with pytest.raises(MCPError) as spent:
                await client.call_tool("notes__echo", {"text": "more"})
    assert status == 429 and body["error"]["code"] == "budget_exceeded"
    assert spent.value.error.code == -32013
    assert _openai_error(spent.value) == body["error"]  # the same error, word for word
    rows = await _wait_rows(gw, spend, 2, key_id=key_id)
    tool = next(r for r in rows if r["alias"] == "mcp/notes")
    model = next(r for r in rows if r["alias"] == "tiny")
    assert tool.keys() == model.keys() and tool["team_id"] == model["team_id"] == team_id
    assert tool["deployment"] == "mcp:notes" and tool["tags"]["mcp_tool"] == "add"
    assert (tool["status"], tool["cost_nusd"], tool["input_tokens"]) == (200, 12_500_000, 0)
    assert 0 < model["cost_nusd"] < 1_000_000
    refused = await _wait_rows(gw, request_audit, 2, key_id=key_id, decision="refused_budget")
    assert {r["alias"] for r in refused} == {"mcp/notes", "tiny"}


async def test_blocked_arguments_are_refused_like_a_blocked_prompt_and_kept_nowhere(
    shared: SharedGateway,
) -> None:
    gw = shared.gw
    key_id, key = await shared.key("research")  # a team that logs payloads
    async with mcp_client(gw.url, key) as client:
        with pytest.raises(MCPError) as blocked:
            await client.call_tool("notes__echo", {"text": INJECTION})
        # masked arguments reach the tool as sent; the audit keeps them masked
        contact = await client.call_tool("files__contact", {"person": "alice.smith@example.com"})
    status, body = await _chat(gw, key, INJECTION)  # the same input checks on a model call
    assert status == 400 and blocked.value.error.code == -32012
    assert _openai_error(blocked.value) == body["error"]
    assert body["error"]["code"] == "content_filter"
    text = contact.content[0].text
    assert not contact.is_error and "alice.smith" not in text
    audit = await _wait_rows(gw, request_audit, 3, key_id=key_id)
    by_alias = {r["alias"]: r for r in audit}
    tool, model = by_alias["mcp/notes"], by_alias["tiny"]
    assert tool["decision"] == "blocked" and (tool["status"], tool["error_type"]) == (
        model["status"],
        model["error_type"],
    )
    assert tool["prompt"] == {"tool": "echo"} and tool["response"] is None
    assert "IGNORE ALL" not in json.dumps(tool, default=str)
    masked = by_alias["mcp/files"]
    assert masked["decision"] == "masked" and "alice.smith" not in json.dumps(masked["prompt"])
    assert set(masked["prompt"]["arguments"]) == {"person"}
    flagged = await _wait_rows(gw, safety_audit, 2, key_id=key_id)
    assert {r["alias"] for r in flagged} == {"mcp/notes", "mcp/files"}
    blocked_row = next(r for r in flagged if r["alias"] == "mcp/notes")
    assert "prompt_injection" in blocked_row["categories"]
    assert not [r for r in await _rows(gw, spend, key_id=key_id) if r["alias"] == "mcp/notes"]


OUTPUT_ONLY = {
    "checks": {"words": {"type": "words"}},
    "policies": {"default": {"output": ["words"]}},
}


async def test_the_output_checks_withhold_a_tool_result(
    notes: HttpUpstream, start_gateway: StartGateway
) -> None:
    gw = await start_gateway(mcp_section(notes.url), safety_section=OUTPUT_ONLY)
    _, key_id, key = await gw.team_and_key("research", team_fields={"log_payloads": True})
    async with mcp_client(gw.url, key) as client:
        page = await client.call_tool("notes__fetch_page", {"url": "https://x.example"})
        # no input checks in this policy: the arguments pass, the echoed answer does not
        echoed = await client.call_tool("notes__echo", {"text": INJECTION})
        clean = await client.call_tool("notes__echo", {"text": "harmless"})
    for result in (page, echoed):
        assert result.is_error and "IGNORE ALL" not in result.model_dump_json()
        assert "prompt_injection" in result.content[0].text
    assert not clean.is_error
    audit = await _wait_rows(gw, request_audit, 2, key_id=key_id, decision="blocked")
    assert all("IGNORE ALL" not in (r["response"] or "") for r in audit)
    assert {r["error_type"] for r in audit} == {"content_filter"}
    billed = await _wait_rows(gw, spend, 3, key_id=key_id)  # the server answered all three
    assert sorted(r["status"] for r in billed) == [200, 400, 400]
    async with gw.session.get(f"{gw.url}/metrics") as resp:  # the path's own request metrics
        metrics = await resp.text()
    counted = 'fleetgate_requests_total{alias="mcp/notes",deployment="mcp:notes",version="",'
    assert f'{counted}status="400"}} 2' in metrics and f'{counted}status="200"}} 1' in metrics


async def test_an_abandoned_tool_call_is_settled_at_once_and_audited(
    notes: HttpUpstream, start_gateway: StartGateway
) -> None:
    section = mcp_section(notes.url)
    section["servers"]["notes"]["max_parallel"] = 1
    gw = await start_gateway(section)
    _, key_id, key = await gw.team_and_key("research")
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    sleep = {"name": "notes__sleep", "arguments": {"seconds": 30}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": sleep}

    async def post() -> None:
        async with gw.session.post(f"{gw.url}/mcp", json=body, headers=headers) as resp:
            await resp.read()

    slow = asyncio.create_task(post())
    async with mcp_client(gw.url, key) as client:

        async def slot_taken() -> bool:
            assert not slow.done(), slow
            try:
                await client.call_tool("notes__echo", {"text": "x"})
            except MCPError as exc:
                return isinstance(exc.error.data, dict) and exc.error.data["reason"] == "parallel"
            return False

        await asyncio.sleep(0.3)  # the slow call reserves the server's one slot first
        await wait_for(slot_taken, timeout=10, interval=0.1)
        slow.cancel()  # the client goes away (its connection closes) while the server works
        with pytest.raises(asyncio.CancelledError):
            await slow

        async def slot_free() -> bool:
            try:
                return not (await client.call_tool("notes__echo", {"text": "y"})).is_error
            except MCPError:
                return False

        await wait_for(slot_free, timeout=5, interval=0.1)  # well before the 30 s sleep ends
    rows = await _wait_rows(gw, request_audit, key_id=key_id, status=499)
    assert (rows[0]["alias"], rows[0]["error_type"]) == ("mcp/notes", "client_disconnected")
    billed = await _wait_rows(gw, spend, key_id=key_id)  # the echoes (spooled, then written)
    assert {r["tags"]["mcp_tool"] for r in billed} == {"echo"}  # the abandoned call: not billed
