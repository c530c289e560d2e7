"""`ToolPath`: one call to an MCP server as a request on the gateway's request path.

A tool call, a prompt or a resource read is a `fleetgate.contract.request.GatewayRequest` of
endpoint ``MCP`` carrying a `fleetgate.contract.tool.ToolCall`, and it runs through the same
stages as a model request (`fleetgate.contract.stages.StageRun`), in their order:

1. tenancy reserves it (one request, no tokens) in the key's, team's and alias's
   (``mcp/<server>``) scopes and in the call's own limits (`fleetgate.mcp.limits`), and
   refuses with the same 429 as a model call; the safety stage checks the arguments;
2. then the call itself: the server and name must exist and the caller's allow-lists admit
   it (else the answer a client gets for an unknown name, audited as ``refused_<kind>``); the
   server is called (its credentials stay in `fleetgate.mcp.upstream`); the checks the stages
   added look at the answer (`fleetgate.mcp.screen`) before it is returned;
3. after it, however it ended (the client gone included), tenancy settles the reservation
   and writes the spend row (a tool call that the server answered: alias ``mcp/<server>``,
   deployment ``mcp:<server>``, tag ``mcp_tool``, its price) and the request audit (arguments
   and answer only for teams that log payloads); the safety stage records flagged checks.

Prompts and resources are not priced: they name no deployment, so no spend row. What went
wrong is a `fleetgate.errors.FleetgateError` on the path, and a JSON-RPC error for the caller
(`fleetgate.mcp.rpc`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest
from fleetgate.contract.stages import Stage, StageRun
from fleetgate.contract.tool import ToolCall, ToolKind, ToolResult
from fleetgate.errors import FleetgateError, RateLimited
from fleetgate.mcp.config import McpConfig, McpServerConfig
from fleetgate.mcp.limits import call_limits
from fleetgate.mcp.rpc import (
    ServerError,
    ServerTimeout,
    ServerUnavailable,
    UnknownName,
    refusal_reason,
    rpc_error,
)
from fleetgate.mcp.screen import Answer
from fleetgate.mcp.upstream import Upstream, UpstreamUnavailable

__all__ = ["Target", "ToolPath"]

T = TypeVar("T", bound=BaseModel)
Record = Callable[[GatewayRequest], None]
Observe = Callable[[str, str, float | None], None]
Send = Callable[[Upstream, str], Awaitable[T]]  # (the server, the own name) -> its answer


@dataclass(frozen=True, slots=True)
class Target:
    """What a name resolved to: the server, its config (prices as reloaded) and the item's
    own name there; ``allowed``: whether the caller's allow-lists admit it; ``upstream``: the
    server's connection."""

    server: str
    config: McpServerConfig
    name: str
    allowed: bool
    upstream: Upstream


class ToolPath:
    """Runs calls to MCP servers through the request path's stages (module docstring).

    ``stages()``: the path's stages in order, read per call (the app sets them once every
    feature is built); ``record``: metrics and logs of a finished request (before the stages'
    ``after``); ``observe(server, decision, seconds)``: the MCP metrics of each call (seconds:
    None for a refused one); ``request_id``: the gateway's request ids."""

    def __init__(
        self,
        stages: Callable[[], Sequence[Stage]],
        *,
        request_id: Callable[[], str],
        record: Record | None = None,
        observe: Observe | None = None,
    ) -> None:
        self.stages = stages
        self.request_id = request_id
        self.record = record
        self.observe = observe

    async def run(
        self,
        config: McpConfig,
        principal: Principal,
        kind: ToolKind,
        name: str,
        arguments: dict[str, Any],
        target: Target | None,
        send: Send[T],
        answer: Answer[T],
    ) -> T:
        """One call (module docstring); raises `MCPError` for what the caller gets as a
        JSON-RPC error. ``send(upstream, own_name)`` calls the server."""
        server = target.server if target is not None else ""
        call = ToolCall(
            kind, server, target.name if target is not None else name, arguments,
            limits=call_limits(config, principal, server, target.config) if target else (),
        )  # fmt: skip
        req = GatewayRequest(
            request_id=self.request_id(), endpoint=Endpoint.MCP, principal=principal,
            body={kind: call.name, "arguments": arguments},  # what the audit keeps
            alias=f"mcp/{server}" if server else "mcp", stream=False, want_usage=False,
            prompt_tokens=0, max_tokens=0, received_at=time.time(), started=time.perf_counter(),
            tool=call,
        )  # fmt: skip
        error: FleetgateError | None = None
        try:
            async with StageRun(self.stages(), req, self.record):
                if target is None or not target.allowed or not principal.may("call"):
                    req.outcome.decision = f"refused_{kind}"
                    raise UnknownName(kind, name)
                return await self._answered(req, call, target, send, answer, config)
        except FleetgateError as exc:
            error = exc
            raise rpc_error(exc) from None
        finally:
            if self.observe is not None:
                decision = _decision(req, error)
                reached = not decision.startswith("refused_")
                self.observe(server or "-", decision, req.outcome.latency_s if reached else None)

    async def _answered(
        self,
        req: GatewayRequest,
        call: ToolCall,
        target: Target,
        send: Send[T],
        answer: Answer[T],
        config: McpConfig,
    ) -> T:
        """The server's answer after the checks, its outcome filled in for the records."""
        raw = await _send(target, send)
        out = req.outcome
        if call.kind == "tool":  # a priced call the server answered: billed, blocked or not
            out.deployment = f"mcp:{target.server}"
            out.cost_nusd = round(target.config.price_usd(call.name) * 1_000_000_000)
            out.tags["mcp_tool"] = call.name
        checked: ToolResult = answer.texts(raw)
        for f in call.filters:
            await f.check(call, checked)
            if checked.withheld is not None:
                break
        if checked.withheld is not None:
            out.status, out.error_type, out.decision = 400, "content_filter", "blocked"
        elif checked.masked:
            out.decision = "masked"
        reply = answer.reply(raw, checked)  # a withheld prompt or resource raises here
        if req.capture_response:
            text = reply.model_dump_json(by_alias=True, exclude_none=True)
            out.response_text = text[: config.max_result_chars]
        return reply


def _decision(req: GatewayRequest, error: FleetgateError | None) -> str:
    """How the call ended, as the metrics name it: the audit's decision, ``refused_<reason>``
    for a limit, ``cancelled`` when the client left, else ``allowed`` or ``error``."""
    out = req.outcome
    if out.decision is not None:
        return out.decision
    if isinstance(error, RateLimited):
        return "refused_" + refusal_reason(error)
    if out.status == 499:
        return "cancelled"
    return "allowed" if out.status < 400 else "error"


async def _send(target: Target, send: Send[T]) -> T:
    """``send`` with the server's failures as the path's errors."""
    try:
        return await send(target.upstream, target.name)
    except UpstreamUnavailable:
        raise ServerUnavailable(f"MCP server {target.server!r} is unavailable") from None
    except TimeoutError:
        raise ServerTimeout(f"MCP server {target.server!r} did not answer in time") from None
    except MCPError as exc:  # the server's own JSON-RPC error: code and message passed on
        raise ServerError(exc.error.code, _scrub(exc.error.message, target.config)) from None


def _scrub(text: str, config: McpServerConfig) -> str:
    """``text`` without the server's own credentials, should it echo them in an error."""
    secrets = [*config.headers.values(), *config.secret_env.values()]
    for secret in secrets:
        for part in (secret, secret.partition(" ")[2]):  # "Bearer xyz" and "xyz"
            if len(part) >= 8:
                text = text.replace(part, "***")
    return text
