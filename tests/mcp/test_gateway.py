"""The MCP gateway end to end: the official MCP client, through the gateway, to two MCP servers
(streamable HTTP and stdio) written with the SDK; tenancy on SQLite."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("mcp")  # the `mcp` extra

from mcp.shared.exceptions import MCPError
from sqlalchemy import select

from fleetgate.api.state import GATEWAY
from fleetgate.tenancy.tables import request_audit, safety_audit, spend
from tests.mcp.conftest import (
    FILES_TOKEN,
    NOTES_TOKEN,
    HttpUpstream,
    SharedGateway,
    StartGateway,
    gateway_config,
    mcp_client,
    mcp_section,
)
from tests.mcp.upstreams import INJECTION
from tests.tenancy.support import MASTER, REDIS_URL, Gateway, wait_for

# One event loop for the module: its tests share the "notes" server and, where they need no
# config of their own, one gateway (tests/mcp/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


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


async def _raw_rpc(gw: Gateway, key: str, method: str, params: dict[str, Any]) -> str:
    """One JSON-RPC request by hand: the whole response text as a client receives it."""
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    async with gw.session.post(f"{gw.url}/mcp", json=body, headers=headers) as resp:
        return f"{resp.status} {dict(resp.headers)} {await resp.text()}"


async def test_lists_and_calls_both_servers_tools_without_leaking_credentials(
    shared: SharedGateway,
) -> None:
    gw = shared.gw
    _, key = await shared.key("research")
    async with mcp_client(gw.url, key) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"notes__echo", "notes__add", "files__echo", "files__add"} <= names
        result = await client.call_tool("notes__echo", {"text": "hi"})
        assert not result.is_error
        assert result.content[0].text == "notes: hi"  # type: ignore[union-attr]
        result = await client.call_tool("files__add", {"a": 2, "b": 40})
        assert result.structured_content == {"result": 42}
        with pytest.raises(MCPError) as echoed:  # the server's own error, passed on...
            await client.call_tool("notes__debug_auth", {})
        assert echoed.value.error.code == -32050
        assert echoed.value.error.message == "denied for ***"  # ...without the secret
    seen = [
        await _raw_rpc(gw, key, "tools/list", {}),
        await _raw_rpc(gw, key, "tools/call", {"name": "notes__echo", "arguments": {"text": "x"}}),
        await _raw_rpc(gw, key, "tools/call", {"name": "nope__x", "arguments": {}}),
    ]
    _, servers = await gw.admin("GET", "/admin/mcp/servers")
    _, config = await gw.admin("GET", "/admin/config")
    seen += [json.dumps(servers), json.dumps(config)]
    assert {s["name"]: s["connected"] for s in servers["data"]} == {"notes": True, "files": True}
    for text in seen:
        assert NOTES_TOKEN not in text and FILES_TOKEN not in text


async def test_a_key_without_the_tool_is_refused_and_audited(
    notes: HttpUpstream, shared: SharedGateway
) -> None:
    gw = shared.gw
    key_id, key = await shared.key("narrow")
    async with mcp_client(gw.url, key) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["notes__echo"]
        with pytest.raises(MCPError) as refused:
            await client.call_tool("files__add", {"a": 1, "b": 2})
        assert refused.value.error.code == -32602
        assert (await client.call_tool("notes__echo", {"text": "ok"})).is_error is False
    rows = await _wait_rows(gw, request_audit, key_id=key_id, decision="refused_tool")
    assert rows[0]["alias"] == "mcp/files" and rows[0]["status"] == 403
    assert not await _rows(gw, spend, key_id=key_id, alias="mcp/files")
    # A reloaded config narrows one key below its team's list, at once.
    other_id, other = await shared.key("research")
    section = mcp_section(notes.url)
    section["access"] = {**section["access"], "keys": {other_id: ["files__add"]}}
    feature = next(f for f in gw.app[GATEWAY].features.all if f.name == "mcp")
    feature.reconfigure(gateway_config(section))
    try:
        async with mcp_client(gw.url, other) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["files__add"]
        async with mcp_client(gw.url, key) as client:  # its team-mate keeps the team's list
            assert [t.name for t in (await client.list_tools()).tools] == ["notes__echo"]
    finally:  # the shared gateway's config as it was
        feature.reconfigure(gateway_config(mcp_section(notes.url)))


async def test_calls_are_in_spend_with_their_price_and_in_the_audit_with_payloads(
    notes: HttpUpstream, start_gateway: StartGateway, database_url: str
) -> None:
    gw = await start_gateway(mcp_section(notes.url), database_url=database_url)
    team_id, key_id, key = await gw.team_and_key("research", team_fields={"log_payloads": True})
    async with mcp_client(gw.url, key) as client:
        await client.call_tool("notes__add", {"a": 1, "b": 2})
        await client.call_tool("notes__echo", {"text": "priced"})
        await client.call_tool("files__echo", {"text": "cheap"})
    rows = await _wait_rows(gw, spend, 3, key_id=key_id)
    cost = {(r["alias"], r["tags"]["mcp_tool"]): r["cost_nusd"] for r in rows}
    assert cost == {
        ("mcp/notes", "add"): 12_500_000,  # tool_prices_usd.add: 0.0125 USD
        ("mcp/notes", "echo"): 2_000_000,  # price_per_call_usd: 0.002
        ("mcp/files", "echo"): 1_000_000,
    }
    assert {r["team_id"] for r in rows} == {team_id}
    audit = await _wait_rows(gw, request_audit, 3, key_id=key_id)
    add = next(r for r in audit if r["prompt"]["tool"] == "add")
    assert add["decision"] == "allowed" and add["prompt"]["arguments"] == {"a": 1, "b": 2}
    assert json.loads(add["response"])["structuredContent"] == {"result": 3}
    _, report = await gw.admin("GET", "/admin/spend?group_by=team")
    assert json.dumps(report).count(team_id) >= 1


async def _metrics(gw: Gateway) -> str:
    async with gw.session.get(f"{gw.url}/metrics") as resp:
        return await resp.text()


def _count(metrics: str, series: str) -> float:
    line = next((x for x in metrics.splitlines() if x.startswith(series + " ")), None)
    return float(line.split()[-1]) if line else 0.0


async def test_an_injection_in_a_tool_result_is_blocked_and_audited(shared: SharedGateway) -> None:
    gw = shared.gw
    key_id, key = await shared.key("research")  # a team that logs payloads
    blocked = 'fleetgate_mcp_tool_calls_total{server="files",decision="blocked"}'
    allowed = 'fleetgate_mcp_tool_calls_total{server="files",decision="allowed"}'
    before = await _metrics(gw)
    async with mcp_client(gw.url, key) as client:
        result = await client.call_tool("files__fetch_page", {"url": "https://x.example"})
        clean = await client.call_tool("files__echo", {"text": "harmless"})
    assert result.is_error is True
    text = result.content[0].text  # type: ignore[union-attr]
    assert "withheld" in text and "prompt_injection" in text
    assert "IGNORE ALL PREVIOUS" not in result.model_dump_json()
    assert result.structured_content is None
    assert clean.is_error is False
    audit = await _wait_rows(gw, request_audit, key_id=key_id, decision="blocked")
    assert audit[0]["error_type"] == "content_filter"
    assert INJECTION not in (audit[0]["response"] or "")  # the audit keeps what the caller got
    flagged = await _wait_rows(gw, safety_audit, key_id=key_id)
    assert flagged[0]["flagged"] and "prompt_injection" in flagged[0]["categories"]
    assert flagged[0]["alias"] == "mcp/files"
    metrics = await _metrics(gw)
    assert _count(metrics, blocked) == _count(before, blocked) + 1
    assert _count(metrics, allowed) == _count(before, allowed) + 1
    assert 'fleetgate_mcp_server_connected{server="notes"} 1' in metrics


async def test_personal_data_in_a_tool_result_is_masked_per_policy(shared: SharedGateway) -> None:
    gw = shared.gw
    key_id, key = await shared.key("research")
    async with mcp_client(gw.url, key) as client:
        result = await client.call_tool("files__contact", {"person": "Alice"})
    text = result.content[0].text  # type: ignore[union-attr]
    assert result.is_error is False
    assert text.startswith("Write to Alice at ") and "alice.smith@example.com" not in text
    audit = await _wait_rows(gw, request_audit, key_id=key_id, decision="masked")
    assert audit[0]["status"] == 200
    flagged = await _wait_rows(gw, safety_audit, key_id=key_id)
    assert flagged[0]["verdicts"][-1]["action"] == "mask"
    assert (await _rows(gw, spend, key_id=key_id))[0]["cost_nusd"] == 1_000_000  # still billed


async def test_personal_data_in_structured_output_is_withheld_and_named(
    shared: SharedGateway,
) -> None:
    """The text is masked, but JSON cannot be: the result is withheld, and the message names
    the check that flagged it (pii), not a bare "policy"."""
    _, key = await shared.key("research")
    async with mcp_client(shared.gw.url, key) as client:
        result = await client.call_tool("files__echo", {"text": "mail alice.smith@example.com"})
    text = result.content[0].text  # type: ignore[union-attr]
    assert result.is_error is True and result.structured_content is None
    assert "alice.smith@example.com" not in result.model_dump_json()
    assert "(pii" in text and "(policy)" not in text
    assert "structured content" in text


async def test_tool_prices_count_against_the_team_budget(shared: SharedGateway) -> None:
    gw = shared.gw
    _, _, key = await gw.team_and_key("budgeted", team_fields={"max_budget_usd": 0.02})
    async with mcp_client(gw.url, key) as client:
        await client.call_tool("notes__add", {"a": 1, "b": 1})  # 0.0125 of 0.02
        await client.call_tool("notes__add", {"a": 1, "b": 1})  # 0.025: over from now on
        refused: MCPError | None = None
        for _ in range(50):  # bounded: the settle lands in the limiter in the background
            try:
                await client.call_tool("notes__echo", {"text": "more"})
            except MCPError as exc:
                refused = exc
                break
            await asyncio.sleep(0.1)
    # a spent budget is named as one (the HTTP API's code), not worded as a rate limit
    assert refused is not None and refused.error.code == -32013
    assert refused.error.message.startswith("Budget exhausted for team")
    assert "rate limit" not in refused.error.message.lower()
    data = refused.error.data
    assert data["reason"] == "budget" and data["code"] == "budget_exceeded"  # type: ignore[index]
    assert data["type"] == "insufficient_quota"  # type: ignore[index]


@pytest.mark.parametrize("redis_url", [None, REDIS_URL], ids=["memory", "redis"])
async def test_tool_calls_are_rate_limited_per_key(
    notes: HttpUpstream, start_gateway: StartGateway, redis_url: str | None
) -> None:
    gw = await start_gateway(mcp_section(notes.url, key_rpm=3), redis_url=redis_url)
    _, key_id, key = await gw.team_and_key("research")
    _, _, other = await gw.team_and_key("research-2", team_fields={})
    async with mcp_client(gw.url, key) as client:
        for i in range(3):
            await client.call_tool("files__echo", {"text": str(i)})
        with pytest.raises(MCPError) as limited:
            await client.call_tool("notes__echo", {"text": "one too many"})
    assert limited.value.error.code == -32011
    assert limited.value.error.message.startswith("Rate limit reached for mcp-key")
    assert "retry in" in limited.value.error.message
    assert limited.value.error.data["code"] == "rate_limit_exceeded"  # type: ignore[index]
    assert 0 < limited.value.error.data["retry_after_s"] <= 60  # type: ignore[index]
    rows = await _wait_rows(gw, request_audit, key_id=key_id, decision="refused_requests")
    assert rows[0]["status"] == 429
    assert other  # another key of its own limit is not affected:
    async with mcp_client(gw.url, other) as client:
        assert not (await client.list_tools()).tools  # team research-2 has no allow-list


async def test_a_dead_server_leaves_the_others_working_and_comes_back(
    own_notes: HttpUpstream, start_gateway: StartGateway
) -> None:
    notes = own_notes  # killed and started again: not the module's shared one
    gw = await start_gateway(mcp_section(notes.url))
    _, _, key = await gw.team_and_key("research")
    notes.kill()
    async with mcp_client(gw.url, key) as client:
        with pytest.raises(MCPError) as gone:
            await client.call_tool("notes__echo", {"text": "anyone?"})
        assert gone.value.error.code in (-32010, -32602)  # unavailable, or already dropped

        async def notes_dropped() -> bool:
            names = {t.name for t in (await client.list_tools()).tools}
            return "files__echo" in names and not any(n.startswith("notes__") for n in names)

        await wait_for(notes_dropped, timeout=10, interval=0.2)
        result = await client.call_tool("files__echo", {"text": "still here"})
        assert result.content[0].text == "files: still here"  # type: ignore[union-attr]
    _, servers = await gw.admin("GET", "/admin/mcp/servers")
    state = {s["name"]: s for s in servers["data"]}
    assert state["notes"]["connected"] is False and state["notes"]["last_error"]
    assert state["files"]["connected"] is True
    await notes.start()  # back on its port: reconnected in the background, tools return
    async with mcp_client(gw.url, key) as client:

        async def notes_back() -> bool:
            return "notes__echo" in {t.name for t in (await client.list_tools()).tools}

        await wait_for(notes_back, timeout=20, interval=0.2)
        result = await client.call_tool("notes__echo", {"text": "back"})
        assert result.content[0].text == "notes: back"  # type: ignore[union-attr]


async def test_the_endpoint_needs_a_virtual_key(shared: SharedGateway) -> None:
    gw = shared.gw
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer sk-fg-not-a-key"}):
        async with gw.session.post(f"{gw.url}/mcp", json=body, headers=headers) as resp:
            assert resp.status == 401
            assert resp.headers["WWW-Authenticate"] == "Bearer"
            reply = await resp.json()
        assert reply["jsonrpc"] == "2.0" and reply["error"]["code"] == -32600


async def test_transport_errors_are_json_rpc_errors_with_4xx(shared: SharedGateway) -> None:
    gw = shared.gw
    _, key = await shared.key("research")
    auth = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    post = {**auth, "Content-Type": "application/json"}
    async with gw.session.post(f"{gw.url}/mcp", data=b"{not json", headers=post) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == -32700
    async with gw.session.get(f"{gw.url}/mcp", headers=auth) as resp:
        assert resp.status == 405  # no server-initiated stream: stateless, JSON responses
    body = {"jsonrpc": "2.0", "id": 3, "method": "resources/templates/list", "params": {}}
    async with gw.session.post(
        f"{gw.url}/mcp", json=body, headers={**post, "MCP-Protocol-Version": "2025-11-25"}
    ) as resp:
        reply = await resp.json()
    assert reply["error"]["code"] == -32601  # resource templates are not aggregated


async def test_without_tenancy_the_master_key_uses_every_tool_within_the_mcp_limits(
    notes: HttpUpstream, start_gateway: StartGateway
) -> None:
    gw = await start_gateway(mcp_section(notes.url, key_rpm=2), tenancy=False)
    async with mcp_client(gw.url, MASTER) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"notes__fetch_page", "files__contact"} <= names
        await client.call_tool("notes__echo", {"text": "1"})
        blocked = await client.call_tool("notes__fetch_page", {"url": "x"})
        assert blocked.is_error  # safety holds without tenancy
        with pytest.raises(MCPError) as limited:
            await client.call_tool("files__echo", {"text": "3"})
        assert limited.value.error.code == -32011


async def test_a_call_past_its_timeout_fails_and_the_server_keeps_serving(
    notes: HttpUpstream, start_gateway: StartGateway
) -> None:
    section = mcp_section(notes.url)
    section["servers"]["files"]["call_timeout_s"] = 0.5
    gw = await start_gateway(section)
    _, key_id, key = await gw.team_and_key("research")
    async with mcp_client(gw.url, key) as client:
        with pytest.raises(MCPError) as late:
            await client.call_tool("files__sleep", {"seconds": 5})
        assert late.value.error.code == -32001
        result = await client.call_tool("files__echo", {"text": "next"})
        assert result.content[0].text == "files: next"  # type: ignore[union-attr]
    rows = await _wait_rows(gw, request_audit, key_id=key_id, decision="error")
    assert rows[0]["status"] == 504
    billed = await _wait_rows(gw, spend, key_id=key_id)
    assert [r["tags"]["mcp_tool"] for r in billed] == ["echo"]  # the late call is not billed


HOSTILE: list[bytes] = [
    b"",
    b"null",
    b"[]",
    b"[1, 2]",
    b'"text"',
    b'{"jsonrpc": "2.0"}',
    b'{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}',
    b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "files__add"}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call",'
    b' "params": {"name": "files__add", "arguments": [1]}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call",'
    b' "params": {"name": "files__add", "arguments": {"a": "x", "b": {}}}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "__"}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "\\u0000__x"}}',
    b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
    b'{"jsonrpc": "2.0", "id": 1, "result": {}}',
    b"\xff\xfe\x00garbage",
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": "x"}',
]


async def test_hostile_bodies_get_4xx_or_json_rpc_errors_never_5xx(shared: SharedGateway) -> None:
    gw = shared.gw
    _, key = await shared.key("research")
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    for body in HOSTILE:
        async with gw.session.post(f"{gw.url}/mcp", data=body, headers=headers) as resp:
            text = await resp.text()
            assert resp.status < 500, (body, resp.status, text)
            if resp.status >= 400:
                assert json.loads(text)["error"]["code"] < 0, (body, text)
    async with mcp_client(gw.url, key) as client:  # still serving
        assert (await client.call_tool("files__add", {"a": 1, "b": 1})).structured_content


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_sdk_high_level_client_negotiates_with_the_gateway(
    shared: SharedGateway, mode: str
) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

    gw = shared.gw
    _, key = await shared.key("research")
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        transport = streamable_http_client(f"{gw.url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:  # type: ignore[arg-type]
            names = {t.name for t in (await client.list_tools()).tools}
            assert "files__add" in names and "notes__echo" in names
            result = await client.call_tool("files__add", {"a": 20, "b": 22})
            assert result.structured_content == {"result": 42}
            era = MODERN_PROTOCOL_VERSIONS if mode == "auto" else HANDSHAKE_PROTOCOL_VERSIONS
            assert client.protocol_version in era  # 2026-07-28 / 2025-11-25 with mcp 2.3


async def test_calls_in_flight_to_a_server_are_capped_by_its_max_parallel(
    notes: HttpUpstream, start_gateway: StartGateway
) -> None:
    section = mcp_section(notes.url)
    section["servers"]["files"]["max_parallel"] = 2
    gw = await start_gateway(section)
    _, _, key = await gw.team_and_key("research")
    async with mcp_client(gw.url, key) as client:
        outcomes = await asyncio.gather(
            *(client.call_tool("files__sleep", {"seconds": 1.5}) for _ in range(4)),
            return_exceptions=True,
        )
        refused = [o for o in outcomes if isinstance(o, MCPError)]
        served = [o for o in outcomes if not isinstance(o, BaseException)]
        assert len(served) == 2 and len(refused) == 2, outcomes
        assert {r.error.data["reason"] for r in refused} == {"parallel"}  # type: ignore[index]
        # the slots are free again once those calls ended
        assert (await client.call_tool("files__sleep", {"seconds": 0})).is_error is False


async def test_prompts_and_resources_pass_through_with_allow_lists_safety_and_audit(
    shared: SharedGateway,
) -> None:
    gw = shared.gw
    key_id, key = await shared.key("research")  # a team that logs payloads
    narrow_id, narrow = await shared.key("narrow")
    async with mcp_client(gw.url, key) as client:
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert {"notes__review", "files__review", "notes__poisoned"} <= prompts
        got = await client.get_prompt("files__review", {"topic": "the budget"})
        assert got.messages[0].content.text == "files: review the budget carefully."  # type: ignore[union-attr]
        with pytest.raises(MCPError) as withheld:  # an injection in a prompt's text
            await client.get_prompt("notes__poisoned", {})
        assert withheld.value.error.code == -32012
        assert "prompt_injection" in withheld.value.error.message
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {"notes://readme", "files://readme", "files://poisoned"} <= uris
        page = await client.read_resource("files://readme")
        text = page.contents[0].text  # type: ignore[union-attr]
        assert text.startswith("files readme: call support at ")
        assert "alice.smith@example.com" not in text  # masked by the pii check
        with pytest.raises(MCPError) as poisoned:
            await client.read_resource("notes://poisoned")
        assert poisoned.value.error.code == -32012
    async with mcp_client(gw.url, narrow) as client:  # its team's list names one of each
        assert [p.name for p in (await client.list_prompts()).prompts] == ["notes__review"]
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        assert listed == ["notes://readme"]
        with pytest.raises(MCPError) as refused:
            await client.get_prompt("files__review", {"topic": "x"})
        assert refused.value.error.code == -32602
        with pytest.raises(MCPError) as missing:  # as if it did not exist
            await client.read_resource("files://readme")
        assert missing.value.error.code == -32002
    audit = await _wait_rows(gw, request_audit, 4, key_id=key_id)
    decisions = {(r["alias"], r["decision"]): r for r in audit}
    assert set(decisions) == {
        ("mcp/files", "allowed"), ("mcp/notes", "blocked"), ("mcp/files", "masked"),
    }  # fmt: skip
    review = decisions["mcp/files", "allowed"]
    assert review["prompt"] == {"prompt": "review", "arguments": {"topic": "the budget"}}
    assert "review the budget" in review["response"]
    masked = decisions["mcp/files", "masked"]
    assert masked["prompt"]["resource"] == "files://readme"
    assert "alice.smith" not in masked["response"]  # the audit keeps what the caller got
    refusals = await _wait_rows(gw, request_audit, 2, key_id=narrow_id)
    assert {r["decision"] for r in refusals} == {"refused_prompt", "refused_resource"}
    assert not await _rows(gw, spend, key_id=key_id)  # prompts and resources are not priced
