"""`ToolGateway`: the aggregated tools, prompts and resources of every upstream, and one
request's path through the gateway's controls.

``list_tools(principal)`` / ``list_prompts``: the namespaced tools and prompts
(``<server>__<name>``) of the connected servers that the caller's allow-lists admit;
``list_resources``: their resources, under their own URIs (the allow-lists see them as
``<server>__<uri>``; a URI two servers both list belongs to the first in the config).
``call(principal, name, arguments)`` (and ``get_prompt``, ``read_resource``, the same way):

1. the tool must exist and be allowed (else the JSON-RPC error a client gets for an unknown
   tool: a caller cannot probe for tools it may not use);
2. the call is reserved in the tenancy limiter (one request, no tokens) in the key's and team's
   scopes, the alias scope ``mcp/<server>``, and the MCP scopes ``mcp-key:``, ``mcp-team:``
   (``mcp.key_rpm``, ``mcp.team_rpm``) and ``mcp-server:`` (the server's ``rpm`` and
   ``max_parallel``); a denial is a JSON-RPC error with the retry delay, ``BUDGET_EXCEEDED``
   for a spent budget and ``RATE_LIMITED`` for a rate or parallel limit;
3. the upstream is called (its credentials stay in `fleetgate.mcp.upstream`);
4. the answer's text goes through the caller's safety policy at the *input* check point
   (`fleetgate.mcp.screen`: text the model will read, indirect prompt injection);
5. settle (a tool call's price into the budgets), then for a tool call one spend row (alias
   ``mcp/<server>``, deployment ``mcp:<server>``, tag ``mcp_tool``), for every request one audit
   row (arguments and answer only for teams that log payloads), and a safety row when a check
   flagged the answer. Prompts and resources are not priced (no spend row).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import mcp.types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.tool_name_validation import TOOL_NAME_REGEX

from fleetgate.contract.principal import Principal
from fleetgate.limits.base import Denial, Limiter, Reservation, Scope
from fleetgate.limits.memory import MemoryLimiter
from fleetgate.mcp.access import ToolAccess
from fleetgate.mcp.config import McpConfig, McpServerConfig
from fleetgate.mcp.metrics import ToolMetrics
from fleetgate.mcp.screen import McpCall, ResultScreen, safety_row
from fleetgate.mcp.upstream import Upstream, UpstreamUnavailable
from fleetgate.safety.runtime import SafetyRuntime
from fleetgate.tenancy.headers import duration
from fleetgate.tenancy.model import Limits
from fleetgate.tenancy.runtime import Tenancy
from fleetgate.tenancy.scopes import scope_for
from fleetgate.tenancy.settles import Settles

__all__ = [
    "BUDGET_EXCEEDED",
    "INVALID_PARAMS",
    "RATE_LIMITED",
    "RESOURCE_NOT_FOUND",
    "TIMED_OUT",
    "UNAVAILABLE",
    "ToolGateway",
]

log = logging.getLogger("fleetgate.mcp")

# JSON-RPC error codes of the gateway. -32000..-32019 is the implementation-defined band; the
# SDK uses -32000 (connection closed, never on the wire) and -32001 (request timeout).
INVALID_PARAMS = -32602  # an unknown (or not allowed) tool, as the MCP spec says
TIMED_OUT = -32001  # the upstream server did not answer within call_timeout_s (the SDK's code)
UNAVAILABLE = -32010  # the upstream server is not connected, or the connection broke
RATE_LIMITED = -32011  # a rate limit or parallel limit refused the call (retry later)
BUDGET_EXCEEDED = -32013  # a budget is spent: no call that costs succeeds before it resets
RESOURCE_NOT_FOUND = -32002  # an unknown (or not allowed) resource, as the MCP spec says
_NEVER_MS = 400 * 86_400_000  # longer than any calendar period: the budget never resets
T = TypeVar("T")


def _no_alerts(scopes: tuple[Scope, ...], totals: dict[str, int], cost: int) -> None:
    return None  # budgets and their alerts belong to tenancy


def _refusal(denial: Denial) -> MCPError:
    """The JSON-RPC error for a refused reservation, named as the HTTP API names it: a spent
    budget (``budget_exceeded``) is not a rate limit (``rate_limit_exceeded``)."""
    what = denial.scope.split(":")[0]
    data: dict[str, Any] = {"retry_after_s": denial.retry_after_ms / 1000, "reason": denial.reason}
    if denial.reason == "budget":
        data |= {"type": "insufficient_quota", "code": "budget_exceeded"}
        resets = (
            "it does not reset"  # a `total` budget
            if denial.retry_after_ms > _NEVER_MS
            else f"it resets in {duration(denial.retry_after_ms)}"
        )
        return MCPError(BUDGET_EXCEEDED, f"Budget exhausted for {what}; {resets}.", data=data)
    data |= {"type": "rate_limit_error", "code": "rate_limit_exceeded"}
    limit = "Parallel call limit" if denial.reason == "parallel" else "Rate limit"
    return MCPError(
        RATE_LIMITED,
        f"{limit} reached for {what} ({denial.reason}); "
        f"retry in {duration(denial.retry_after_ms)}.",
        data=data,
    )


def _nusd(usd: float) -> int:
    return round(usd * 1_000_000_000)


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
        self.screen = ResultScreen(safety)
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

    def _listed(self, principal: Principal, items: Callable[[Upstream], list[Any]]) -> list[Any]:
        """The named items (tools, prompts) of each server that ``principal`` may use, renamed."""
        out: list[Any] = []
        for server, upstream in self.upstreams.items():
            for item in list(items(upstream)):
                name = self.tool_name(server, item.name)
                if TOOL_NAME_REGEX.fullmatch(name) and self.access.allows(principal, name):
                    out.append(item.model_copy(update={"name": name}))
        return out

    def list_tools(self, principal: Principal) -> list[types.Tool]:
        """The namespaced tools of the connected servers that ``principal`` may use."""
        return self._listed(principal, lambda up: up.tools)

    def list_prompts(self, principal: Principal) -> list[types.Prompt]:
        """The namespaced prompts of the connected servers that ``principal`` may use."""
        return self._listed(principal, lambda up: up.prompts)

    def list_resources(self, principal: Principal) -> list[types.Resource]:
        """The resources of the connected servers that ``principal`` may read (own URIs)."""
        out: list[types.Resource] = []
        seen: set[str] = set()
        for server, upstream in self.upstreams.items():
            for resource in list(upstream.resources):
                uri = str(resource.uri)
                if uri not in seen and self.access.allows(principal, self.tool_name(server, uri)):
                    seen.add(uri)
                    out.append(resource)
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

    def _resource_owner(self, uri: str) -> tuple[str, str, Upstream] | None:
        for server, upstream in self.upstreams.items():
            if any(str(r.uri) == uri for r in upstream.resources):
                return server, uri, upstream
        return None

    # -- calling -----------------------------------------------------------------------------

    def _admit(
        self, principal: Principal, kind: str, name: str, arguments: dict[str, Any]
    ) -> tuple[McpCall, Upstream]:
        """The request, once its name resolves to a server the caller may use; else the
        JSON-RPC error for an unknown name (refusals are audited as ``refused_<kind>``)."""
        if kind == "resource":
            resolved = self._resource_owner(name)
            allowed_as = self.tool_name(resolved[0], name) if resolved else name
        else:
            resolved = self._resolve(name)
            allowed_as = name
        call = McpCall(
            self._request_id(), principal, resolved[0] if resolved else "", name, arguments,
            kind=kind,
        )  # fmt: skip
        if resolved is None or not self.access.allows(principal, allowed_as):
            self._finish(call, f"refused_{kind}", 403, "permission_error")
            if kind == "resource":
                raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {name}")
            raise MCPError(INVALID_PARAMS, f"Unknown {kind}: {name}")
        call.name = resolved[1]
        return call, resolved[2]

    async def call(
        self, principal: Principal, name: str, arguments: dict[str, Any] | None
    ) -> types.CallToolResult:
        """One tool call through the gateway (module docstring); raises `MCPError` for what
        the caller gets as a JSON-RPC error."""
        call, upstream = self._admit(principal, "tool", name, arguments or {})
        return await self._through(
            call, upstream, lambda: upstream.call(call.name, call.arguments),
            self.screen.tool_result, priced=True,
        )  # fmt: skip

    async def get_prompt(
        self, principal: Principal, name: str, arguments: dict[str, str] | None
    ) -> types.GetPromptResult:
        """``prompts/get`` through the gateway, as a tool call but not priced."""
        call, upstream = self._admit(principal, "prompt", name, dict(arguments or {}))
        return await self._through(
            call, upstream, lambda: upstream.get_prompt(call.name, dict(arguments or {})),
            self.screen.prompt, priced=False,
        )  # fmt: skip

    async def read_resource(self, principal: Principal, uri: str) -> types.ReadResourceResult:
        """``resources/read`` through the gateway, as a tool call but not priced."""
        call, upstream = self._admit(principal, "resource", uri, {})
        return await self._through(
            call, upstream, lambda: upstream.read_resource(uri), self.screen.resource,
            priced=False,
        )  # fmt: skip

    async def _through(
        self,
        call: McpCall,
        upstream: Upstream,
        send: Callable[[], Awaitable[T]],
        screen: Callable[[McpCall, T], Awaitable[T]],
        *,
        priced: bool,
    ) -> T:
        reservation = await self._reserve(call)
        cost = 0
        try:
            result = await screen(call, await self._call_upstream(call, send))
            call.result = result
            if priced:
                cost = _nusd(self._server_config(call.server, upstream).price_usd(call.name))
            return result
        except asyncio.CancelledError:  # the client went away: audited, not billed
            call.decision, call.status, call.error_type = "cancelled", 499, "cancelled"
            raise
        finally:
            self._settle(reservation, cost)
            self._finish(call, call.decision, call.status, call.error_type, cost, priced)

    async def _call_upstream(self, call: McpCall, send: Callable[[], Awaitable[T]]) -> T:
        upstream = self.upstreams[call.server]
        try:
            return await send()
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

    async def _reserve(self, call: McpCall) -> Reservation | None:
        scopes = self._scopes(call)
        if not scopes:
            return None
        result = await self.limiter.reserve(call.request_id, scopes, 0)
        if isinstance(result, Denial):
            # audited as the HTTP path audits it (tenancy/stage.py): the decision names the reason
            self._finish(call, "refused_" + result.reason, 429, "rate_limit_error")
            raise _refusal(result)
        return result

    def _scopes(self, call: McpCall) -> tuple[Scope, ...]:
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

    # -- records -----------------------------------------------------------------------------

    def _finish(
        self,
        call: McpCall,
        decision: str,
        status: int,
        error_type: str | None,
        cost: int = 0,
        priced: bool = True,
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
        if priced and status < 500 and decision in ("allowed", "masked", "blocked"):
            records.append(("spend", {
                "request_id": call.request_id, "created_ms": created_ms, "key_id": p.key_id,
                "team_id": p.team_id, "alias": alias, "deployment": f"mcp:{call.server}",
                "version": None, "status": status, "input_tokens": 0, "output_tokens": 0,
                "cached_tokens": 0, "cost_nusd": cost,
                "latency_ms": int((time.time() - call.started) * 1000),
                "tags": {**dict(p.tags), "mcp_tool": call.name},
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
                "prompt": {call.kind: call.name, "arguments": call.arguments} if full else None,
                "response": self._result_text(call.result) if full else None,
            }))  # fmt: skip
        if call.safety is not None:
            records.append(("safety", safety_row(call, alias, created_ms)))
        self.tenancy.writer.submit_all(records)

    def _result_text(self, result: Any) -> str | None:
        if result is None:
            return None
        text: str = result.model_dump_json(by_alias=True, exclude_none=True)
        return text[: self.config.max_result_chars]


def _scrub(text: str, config: McpServerConfig) -> str:
    """``text`` without the server's own credentials, should it echo them in an error."""
    secrets = [*config.headers.values(), *config.secret_env.values()]
    for secret in secrets:
        for part in (secret, secret.partition(" ")[2]):  # "Bearer xyz" and "xyz"
            if len(part) >= 8:
                text = text.replace(part, "***")
    return text
