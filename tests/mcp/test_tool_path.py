"""`ToolPath` in process: a call to an MCP server runs through the stages it is given, as a
model request does (fake stages and a fake server; the gateway end to end is in
test_tool_path_stages.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("mcp")  # the `mcp` extra

import mcp.types as types
from mcp.shared.exceptions import MCPError

from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest, Outcome
from fleetgate.contract.tool import ToolCall, ToolResult
from fleetgate.errors import RateLimited
from fleetgate.mcp.config import McpConfig, McpServerConfig
from fleetgate.mcp.limits import LocalLimits
from fleetgate.mcp.rpc import RATE_LIMITED, WITHHELD
from fleetgate.mcp.screen import PROMPT, TOOL
from fleetgate.mcp.tool_path import Target, ToolPath
from fleetgate.mcp.upstream import Upstream

SERVER = McpServerConfig(transport="http", url="http://127.0.0.1:9/mcp", price_per_call_usd=0.003)
CONFIG = McpConfig(servers={"notes": SERVER}, key_rpm=1)
CALLER = Principal(key_id="k1", team_id="t1")


class Masker:
    """A filter that masks ``secret`` in every text, or withholds the answer."""

    def __init__(self, withhold: bool) -> None:
        self.withhold = withhold

    async def check(self, call: ToolCall, result: ToolResult) -> None:
        if self.withhold:
            result.withheld = "words: prompt_injection"
            return
        for i, text in enumerate(result.texts):
            if text is not None and "secret" in text:
                result.texts[i], result.masked = text.replace("secret", "***"), True


class Recording:
    """A stage that logs what it sees, and may refuse or add a filter."""

    def __init__(self, name: str, log: list[Any], *, refuse: bool = False) -> None:
        self.name = name
        self.log = log
        self.refuse = refuse
        self.filter: Masker | None = None

    async def before(self, req: GatewayRequest) -> None:
        assert req.tool is not None
        self.log.append(("before", self.name, req.endpoint, req.alias, req.tool.kind, req.body))
        if self.refuse:
            raise RateLimited("Rate limit reached for key (requests); retry in 1s.")
        if self.filter is not None:
            req.tool.filters.append(self.filter)

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        self.log.append(
            ("after", self.name, outcome.status, outcome.decision, outcome.deployment,
             outcome.cost_nusd, dict(outcome.tags), outcome.response_text)
        )  # fmt: skip


def _target(allowed: bool = True) -> Target:
    up = Upstream("notes", SERVER, reconnect_s=1, ping_interval_s=1)
    return Target("notes", SERVER, "echo", allowed, up)


def _path(stages: list[Any], observed: list[Any] | None = None) -> ToolPath:
    def observe(server: str, decision: str, seconds: float | None) -> None:
        if observed is not None:
            observed.append((server, decision, seconds is not None))

    def capture(req: GatewayRequest) -> None:
        req.capture_response = True  # as tenancy does for a team that logs payloads

    first = Recording("first", [])
    first.before = _also(first.before, capture)  # type: ignore[method-assign]
    return ToolPath(lambda: [first, *stages], request_id=lambda: "req-1", observe=observe)


def _also(before: Any, extra: Any) -> Any:
    async def run(req: GatewayRequest) -> None:
        extra(req)
        await before(req)

    return run


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def test_a_tool_call_runs_every_stage_in_order_and_is_billed_once_answered() -> None:
    log: list[Any] = []
    observed: list[Any] = []
    path = _path([Recording("a", log), Recording("b", log)], observed)
    sent: list[str] = []

    async def send(up: Upstream, own: str) -> types.CallToolResult:
        sent.append(own)
        return _text("hello")

    reply = await path.run(CONFIG, CALLER, "tool", "notes__echo", {"x": 1}, _target(), send, TOOL)
    assert reply.content[0].text == "hello"  # type: ignore[union-attr]
    assert sent == ["echo"]
    body = {"tool": "echo", "arguments": {"x": 1}}
    assert log[:2] == [
        ("before", "a", Endpoint.MCP, "mcp/notes", "tool", body),
        ("before", "b", Endpoint.MCP, "mcp/notes", "tool", body),
    ]
    after = [e[:7] for e in log[2:]]
    billed = ("mcp:notes", 3_000_000, {"mcp_tool": "echo"})
    assert after == [("after", "b", 200, None, *billed), ("after", "a", 200, None, *billed)]
    assert '"hello"' in log[-1][7]  # the answer as the caller got it, for the audit
    assert observed == [("notes", "allowed", True)]


async def test_a_prompt_is_not_billed_and_a_refused_call_never_reaches_the_server() -> None:
    log: list[Any] = []
    path = _path([Recording("a", log), Recording("limits", log, refuse=True)])

    async def send(up: Upstream, own: str) -> types.GetPromptResult:
        raise AssertionError("a refused call must not reach the server")

    with pytest.raises(MCPError) as refused:
        await path.run(CONFIG, CALLER, "prompt", "notes__echo", {}, _target(), send, PROMPT)
    assert refused.value.error.code == RATE_LIMITED
    assert refused.value.error.data["status"] == 429
    # the stage before the refusing one ends (settles) it; nothing was sent or billed
    assert [e[:6] for e in log[2:]] == [("after", "a", 429, None, None, None)]
    log.clear()
    path = _path([Recording("a", log)])

    async def prompt(up: Upstream, own: str) -> types.GetPromptResult:
        message = types.PromptMessage(role="user", content=types.TextContent(type="text", text="p"))
        return types.GetPromptResult(messages=[message])

    await path.run(CONFIG, CALLER, "prompt", "notes__echo", {}, _target(), prompt, PROMPT)
    assert log[1][:5] == ("after", "a", 200, None, None)  # no deployment: no spend row


async def test_a_name_the_caller_may_not_use_is_refused_inside_the_path_and_audited() -> None:
    log: list[Any] = []
    observed: list[Any] = []
    path = _path([Recording("a", log)], observed)

    async def send(up: Upstream, own: str) -> types.CallToolResult:
        raise AssertionError("not allowed: never sent")

    for target in (_target(allowed=False), None):
        with pytest.raises(MCPError) as unknown:
            await path.run(CONFIG, CALLER, "tool", "notes__echo", {}, target, send, TOOL)
        assert unknown.value.error.code == -32602
        assert unknown.value.error.message == "Unknown tool: notes__echo"
    assert [e[:4] for e in log if e[0] == "after"] == [
        ("after", "a", 403, "refused_tool"),
        ("after", "a", 403, "refused_tool"),
    ]
    assert [e[3] for e in log if e[0] == "before"] == ["mcp/notes", "mcp"]
    assert observed == [("notes", "refused_tool", False), ("-", "refused_tool", False)]


async def test_the_checks_a_stage_adds_mask_or_withhold_the_answer() -> None:
    log: list[Any] = []
    stage = Recording("safety", log)
    path = _path([stage])

    async def send(up: Upstream, own: str) -> types.CallToolResult:
        return _text("the secret is out")

    stage.filter = Masker(withhold=False)
    masked = await path.run(CONFIG, CALLER, "tool", "notes__echo", {}, _target(), send, TOOL)
    assert masked.content[0].text == "the *** is out"  # type: ignore[union-attr]
    assert log[-1][2:4] == (200, "masked")
    assert "secret" not in log[-1][7]  # the audit keeps what the caller got
    stage.filter = Masker(withhold=True)
    withheld = await path.run(CONFIG, CALLER, "tool", "notes__echo", {}, _target(), send, TOOL)
    assert withheld.is_error and "prompt_injection" in withheld.content[0].text  # type: ignore[union-attr]
    assert log[-1][2:5] == (400, "blocked", "mcp:notes")  # answered: billed
    assert "secret" not in log[-1][7]

    async def prompt(up: Upstream, own: str) -> types.GetPromptResult:
        text = types.TextContent(type="text", text="secret")
        return types.GetPromptResult(messages=[types.PromptMessage(role="user", content=text)])

    with pytest.raises(MCPError) as held:
        await path.run(CONFIG, CALLER, "prompt", "notes__p", {}, _target(), prompt, PROMPT)
    assert held.value.error.code == WITHHELD
    assert log[-1][2:4] == (400, "blocked") and log[-1][7] is None


async def test_an_abandoned_call_ends_every_stage_that_began() -> None:
    log: list[Any] = []
    path = _path([Recording("a", log)])
    started = asyncio.Event()

    async def send(up: Upstream, own: str) -> types.CallToolResult:
        started.set()
        await asyncio.sleep(60)
        raise AssertionError("cancelled before")

    task = asyncio.create_task(
        path.run(CONFIG, CALLER, "tool", "notes__echo", {}, _target(), send, TOOL)
    )
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log[-1][:6] == ("after", "a", 499, None, None, None)  # settled, not billed


async def test_without_tenancy_the_mcp_limits_are_counted_in_process() -> None:
    limits = LocalLimits()
    path = ToolPath(lambda: [limits], request_id=lambda: "r")

    async def send(up: Upstream, own: str) -> types.CallToolResult:
        return _text("ok")

    await path.run(CONFIG, CALLER, "tool", "notes__echo", {}, _target(), send, TOOL)
    with pytest.raises(MCPError) as limited:  # key_rpm: 1
        await path.run(CONFIG, CALLER, "tool", "notes__echo", {}, _target(), send, TOOL)
    assert limited.value.error.code == RATE_LIMITED
    assert limited.value.error.message.startswith("Rate limit reached for mcp-key (requests)")
    assert limited.value.error.data["reason"] == "requests"
    await limits.drain()
