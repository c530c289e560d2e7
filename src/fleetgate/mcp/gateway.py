"""`ToolGateway`: the aggregated tools of every upstream, and one tool call's path through the
gateway's controls.

``list_tools(principal)``: the namespaced tools (``<server>__<tool>``) of the connected servers
that the caller's allow-lists admit. ``call(principal, name, arguments)``:

1. the tool must exist and be allowed (else the JSON-RPC error a client gets for an unknown
   tool: a caller cannot probe for tools it may not use);
2. the call is reserved in the tenancy limiter (one request, no tokens) in the key's and team's
   scopes, the alias scope ``mcp/<server>``, and the MCP scopes ``mcp-key:``, ``mcp-team:``
   (``mcp.key_rpm``, ``mcp.team_rpm``) and ``mcp-server:`` (the server's ``rpm`` and
   ``max_parallel``); a denial is a JSON-RPC error with the retry delay;
3. the upstream is called (its credentials stay in `fleetgate.mcp.upstream`);
4. the result's text goes through the caller's safety policy at the *input* check point (a tool
   result is text the model will read: indirect prompt injection): a block replaces the result
   with an ``isError`` result naming the check, a mask rewrites the text;
5. settle (the call's price into the budgets), then one spend row (alias ``mcp/<server>``,
   deployment ``mcp:<server>``, tag ``mcp_tool``) and one audit row (arguments and result only
   for teams that log payloads), and a safety row when a check flagged the result.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp.types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.tool_name_validation import TOOL_NAME_REGEX

from fleetgate.limits.base import Denial, Limiter, Reservation, Scope
from fleetgate.limits.memory import MemoryLimiter
from fleetgate.mcp.access import ToolAccess
from fleetgate.mcp.config import McpConfig, McpServerConfig
from fleetgate.mcp.metrics import ToolMetrics
from fleetgate.mcp.upstream import Upstream, UpstreamUnavailable
from fleetgate.safety.base import Action, CheckContext, CheckPoint, PolicyDecision
from fleetgate.safety.runtime import SafetyRuntime
from fleetgate.tenancy.headers import duration
from fleetgate.tenancy.model import Limits
from fleetgate.tenancy.principal import Principal
from fleetgate.tenancy.runtime import Tenancy
from fleetgate.tenancy.scopes import scope_for
from fleetgate.tenancy.settles import Settles

__all__ = ["INVALID_PARAMS", "RATE_LIMITED", "TIMED_OUT", "UNAVAILABLE", "ToolGateway"]

log = logging.getLogger("fleetgate.mcp")

# JSON-RPC error codes of the gateway. -32000..-32019 is the implementation-defined band; the
# SDK uses -32000 (connection closed, never on the wire) and -32001 (request timeout).
INVALID_PARAMS = -32602  # an unknown (or not allowed) tool, as the MCP spec says
TIMED_OUT = -32001  # the upstream server did not answer within call_timeout_s (the SDK's code)
UNAVAILABLE = -32010  # the upstream server is not connected, or the connection broke
RATE_LIMITED = -32011  # a rate limit, parallel limit or budget refused the call


def _no_alerts(scopes: tuple[Scope, ...], totals: dict[str, int], cost: int) -> None:
    return None  # budgets and their alerts belong to tenancy


def _nusd(usd: float) -> int:
    return round(usd * 1_000_000_000)


@dataclass(slots=True)
class _Call:
    """What one call produced, for its records."""

    request_id: str
    principal: Principal
    server: str
    tool: str
    arguments: dict[str, Any]
    started: float = field(default_factory=time.time)
    decision: str = "allowed"
    status: int = 200
    error_type: str | None = None
    result: types.CallToolResult | None = None
    safety: PolicyDecision | None = None


class ToolGateway:
    """Aggregation, access, limits, safety and records for MCP tools (module docstring)."""

    def __init__(
        self,
        config: McpConfig,
        upstreams: Mapping[str, Upstream],
        *,
        request_id: Callable[[], str],
        tenancy: Tenancy | None = None,
        safety: SafetyRuntime | None = None,
        metrics: ToolMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.upstreams = dict(upstreams)
        self.tenancy = tenancy
        self.safety = safety
        self._request_id = request_id
        self.access = ToolAccess(config.access, self._team_name)
        # Without tenancy the MCP limits still hold, in this process.
        self.limiter: Limiter = tenancy.limiter if tenancy is not None else MemoryLimiter()
        self.settles = tenancy.settles if tenancy is not None else Settles(self.limiter, _no_alerts)

    def reconfigure(self, config: McpConfig) -> None:
        """A reloaded ``mcp:`` section: access, limits and prices at once; servers themselves
        (added, removed, moved) at the next restart."""
        self.config = config
        self.access = ToolAccess(config.access, self._team_name)

    def _team_name(self, team_id: str) -> str | None:
        team = self.tenancy.cache.team(team_id) if self.tenancy is not None else None
        return team.name if team is not None else None

    # -- listing -----------------------------------------------------------------------------

    def tool_name(self, server: str, tool: str) -> str:
        return f"{server}{self.config.separator}{tool}"

    def list_tools(self, principal: Principal) -> list[types.Tool]:
        """The namespaced tools of the connected servers that ``principal`` may use."""
        out: list[types.Tool] = []
        for server, upstream in self.upstreams.items():
            for tool in list(upstream.tools):
                name = self.tool_name(server, tool.name)
                if TOOL_NAME_REGEX.fullmatch(name) and self.access.allows(principal, name):
                    out.append(tool.model_copy(update={"name": name}))
        return out

    def _server_config(self, server: str, upstream: Upstream) -> McpServerConfig:
        """The server's prices and limits as reloaded (its connection keeps the started one)."""
        return self.config.servers.get(server, upstream.config)

    def _resolve(self, name: str) -> tuple[str, str, Upstream] | None:
        server, sep, tool = name.partition(self.config.separator)
        upstream = self.upstreams.get(server)
        if not sep or not tool or upstream is None:
            return None
        return server, tool, upstream

    # -- calling -----------------------------------------------------------------------------

    async def call(
        self, principal: Principal, name: str, arguments: dict[str, Any] | None
    ) -> types.CallToolResult:
        """One tool call through the gateway (module docstring); raises `MCPError` for what
        the caller gets as a JSON-RPC error."""
        resolved = self._resolve(name)
        call = _Call(
            self._request_id(), principal, resolved[0] if resolved else "", name, arguments or {}
        )
        if resolved is None or not self.access.allows(principal, name):
            self._finish(call, "refused_tool", 403, "permission_error")
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}")
        server, call.tool, upstream = resolved
        reservation = await self._reserve(call)
        cost = 0
        try:
            result = await self._call_upstream(call, upstream)
            result = await self._check_result(call, result)
            call.result = result
            cost = _nusd(self._server_config(server, upstream).price_usd(call.tool))
            return result
        except asyncio.CancelledError:  # the client went away: audited, not billed
            call.decision, call.status, call.error_type = "cancelled", 499, "cancelled"
            raise
        finally:
            self._settle(reservation, cost)
            self._finish(call, call.decision, call.status, call.error_type, cost)

    async def _call_upstream(self, call: _Call, upstream: Upstream) -> types.CallToolResult:
        try:
            return await upstream.call(call.tool, call.arguments)
        except UpstreamUnavailable:
            call.decision, call.status, call.error_type = "error", 502, "upstream_error"
            raise MCPError(UNAVAILABLE, f"MCP server {call.server!r} is unavailable") from None
        except TimeoutError:
            call.decision, call.status, call.error_type = "error", 504, "timeout"
            raise MCPError(
                TIMED_OUT, f"MCP server {call.server!r} did not answer in time"
            ) from None
        except MCPError as exc:  # the server's own JSON-RPC error: code and message passed on
            call.decision, call.status, call.error_type = "error", 400, "upstream_error"
            raise MCPError(exc.error.code, _scrub(exc.error.message, upstream.config)) from None

    async def _reserve(self, call: _Call) -> Reservation | None:
        scopes = self._scopes(call)
        if not scopes:
            return None
        result = await self.limiter.reserve(call.request_id, scopes, 0)
        if isinstance(result, Denial):
            self._finish(call, "refused_" + result.reason, 429, "rate_limit_error")
            what = result.scope.split(":")[0]
            raise MCPError(
                RATE_LIMITED,
                f"Rate limit reached for {what} ({result.reason}); "
                f"retry in {duration(result.retry_after_ms)}.",
                data={"retry_after_s": result.retry_after_ms / 1000, "reason": result.reason},
            )
        return result

    def _scopes(self, call: _Call) -> tuple[Scope, ...]:
        p, cfg = call.principal, self.config
        now = int(time.time() * 1000)
        found: list[Scope] = []
        if self.tenancy is not None and not p.is_master:
            entry = self.tenancy.cache.entry(p.key_id)
            found.extend(self.tenancy.scopes.scopes(entry, f"mcp/{call.server}"))
        server_cfg = self._server_config(call.server, self.upstreams[call.server])
        for scope in (
            scope_for(f"mcp-key:{p.key_id}", Limits(rpm=cfg.key_rpm), now),
            scope_for(f"mcp-team:{p.team_id}", Limits(rpm=cfg.team_rpm), now)
            if p.team_id
            else None,
            scope_for(
                f"mcp-server:{call.server}",
                Limits(rpm=server_cfg.rpm, max_parallel=server_cfg.max_parallel),
                now,
            ),
        ):
            if scope is not None:
                found.append(scope)
        return tuple(found)

    def _settle(self, reservation: Reservation | None, cost: int) -> None:
        if reservation is None:
            return
        self.settles.submit(reservation, 0, cost)

    async def drain(self) -> None:
        """Finish the settles still running (shutdown)."""
        if self.tenancy is None:
            await self.settles.drain()

    # -- safety on the result ----------------------------------------------------------------

    async def _check_result(
        self, call: _Call, result: types.CallToolResult
    ) -> types.CallToolResult:
        if self.safety is None:
            return result
        policy = self.safety.stage.policy_for(f"mcp/{call.server}", call.principal.team_id)
        if not policy.checks(CheckPoint.INPUT):
            return result
        ctx = CheckContext(
            stage=CheckPoint.INPUT, role="tool", alias=f"mcp/{call.server}",
            team=call.principal.team_id, key_id=call.principal.key_id,
            request_id=call.request_id,
        )  # fmt: skip
        content: list[Any] = []
        masked = False
        for block in result.content:
            text = _block_text(block)
            if text is None:
                content.append(block)
                continue
            decision = await policy.run(CheckPoint.INPUT, text, ctx)
            if decision.blocked:
                return self._blocked(call, decision)
            if decision.action is Action.MASK:
                masked = True
                call.safety = decision
                content.append(_with_text(block, decision.text))
            else:
                content.append(block)
        structured = result.structured_content
        if structured is not None:
            raw = json.dumps(structured, ensure_ascii=False)
            decision = await policy.run(CheckPoint.INPUT, raw, ctx)
            if decision.blocked or decision.action is Action.MASK:
                # JSON cannot be masked in place without breaking its schema: withhold it all.
                return self._blocked(call, decision)
        if masked:
            call.decision = "masked"
            return result.model_copy(update={"content": content})
        return result

    def _blocked(self, call: _Call, decision: PolicyDecision) -> types.CallToolResult:
        call.safety = decision
        call.decision, call.status, call.error_type = "blocked", 400, "content_filter"
        reason = decision.reason
        check = reason.check if reason is not None else "policy"
        cats = ", ".join(reason.categories) if reason is not None else ""
        text = (
            f"The gateway withheld this tool result: its content policy flagged it "
            f"({check}{': ' + cats if cats else ''})."
        )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=True
        )

    # -- records -----------------------------------------------------------------------------

    def _finish(
        self, call: _Call, decision: str, status: int, error_type: str | None, cost: int = 0
    ) -> None:
        if self.metrics is not None:
            reached = not decision.startswith("refused_")
            elapsed = time.time() - call.started if reached else None
            self.metrics.record(call.server or "-", decision, elapsed)
        if self.tenancy is None:
            return
        p = call.principal
        alias = f"mcp/{call.server}" if call.server else "mcp"
        created_ms = int(call.started * 1000)
        records: list[tuple[str, dict[str, Any]]] = []
        if status < 500 and decision in ("allowed", "masked", "blocked"):
            records.append(("spend", {
                "request_id": call.request_id, "created_ms": created_ms, "key_id": p.key_id,
                "team_id": p.team_id, "alias": alias, "deployment": f"mcp:{call.server}",
                "version": None, "status": status, "input_tokens": 0, "output_tokens": 0,
                "cached_tokens": 0, "cost_nusd": cost,
                "latency_ms": int((time.time() - call.started) * 1000),
                "tags": {**dict(p.tags), "mcp_tool": call.tool},
            }))  # fmt: skip
            if self.tenancy.stage.usage is not None:
                self.tenancy.stage.usage.record(p.team_id, alias, cost)
        if self.tenancy.config.audit_requests:
            team = self.tenancy.cache.team(p.team_id) if p.team_id else None
            full = team is not None and team.log_payloads
            records.append(("audit", {
                "request_id": call.request_id, "created_ms": created_ms, "key_id": p.key_id,
                "team_id": p.team_id, "alias": alias, "decision": decision, "status": status,
                "error_type": error_type,
                "prompt": {"tool": call.tool, "arguments": call.arguments} if full else None,
                "response": self._result_text(call.result) if full else None,
            }))  # fmt: skip
        if call.safety is not None:
            records.append(("safety", _safety_row(call, alias, created_ms)))
        self.tenancy.writer.submit_all(records)

    def _result_text(self, result: types.CallToolResult | None) -> str | None:
        if result is None:
            return None
        text = result.model_dump_json(by_alias=True, exclude_none=True)
        return text[: self.config.max_result_chars]


def _scrub(text: str, config: McpServerConfig) -> str:
    """``text`` without the server's own credentials, should it echo them in an error."""
    secrets = [*config.headers.values(), *config.secret_env.values()]
    for secret in secrets:
        for part in (secret, secret.partition(" ")[2]):  # "Bearer xyz" and "xyz"
            if len(part) >= 8:
                text = text.replace(part, "***")
    return text


def _block_text(block: Any) -> str | None:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource) and isinstance(
        block.resource, types.TextResourceContents
    ):
        return block.resource.text
    return None


def _with_text(block: Any, text: str) -> Any:
    if isinstance(block, types.TextContent):
        return block.model_copy(update={"text": text})
    resource = block.resource.model_copy(update={"text": text})
    return block.model_copy(update={"resource": resource})


def _safety_row(call: _Call, alias: str, created_ms: int) -> dict[str, Any]:
    decision = call.safety
    assert decision is not None
    return {
        "id": call.request_id,
        "request_id": call.request_id,
        "created_ms": created_ms,
        "key_id": call.principal.key_id,
        "team_id": call.principal.team_id,
        "alias": alias,
        "flagged": True,
        "categories": decision.categories,
        "verdicts": [
            {"check": v.check, "action": v.action.value, "categories": list(v.categories),
             "error": v.error, "detail": v.detail}
            for v in decision.verdicts
        ],
        "failed": any(v.error for v in decision.verdicts),
    }  # fmt: skip
