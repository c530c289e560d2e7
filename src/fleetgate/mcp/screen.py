"""`ResultScreen`: the caller's safety policy over what an MCP server returned.

A tool result, a prompt's messages and a resource's text are about to enter a model's context
like a user's message, so their text goes through the *input* checks of the caller's policy
(the team's, else the one of alias ``mcp/<server>``, else the default): the defence against
indirect prompt injection. A block withholds the answer (a tool: an ``isError`` result naming
the check; a prompt or resource: the JSON-RPC error `WITHHELD`); a mask rewrites the flagged
spans in the text. Structured tool output (JSON) cannot be masked without breaking its schema,
so a flag there withholds the whole result. `McpCall` carries what one request produced, for
its records.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import mcp.types as types
from mcp.shared.exceptions import MCPError

from fleetgate.contract.principal import Principal
from fleetgate.safety.base import Action, CheckContext, CheckPoint, PolicyDecision
from fleetgate.safety.policy import Policy
from fleetgate.safety.runtime import SafetyRuntime

__all__ = ["WITHHELD", "McpCall", "ResultScreen", "safety_row"]

WITHHELD = -32012  # a prompt or resource whose text the caller's content policy blocked


@dataclass(slots=True)
class McpCall:
    """One request to an upstream server (a tool call, a prompt, a resource read)."""

    request_id: str
    principal: Principal
    server: str
    name: str  # the upstream's own tool or prompt name, or the resource's URI
    arguments: dict[str, Any]
    kind: str = "tool"  # "tool", "prompt" or "resource"
    started: float = field(default_factory=time.time)
    decision: str = "allowed"
    status: int = 200
    error_type: str | None = None
    result: Any = None  # what the caller received (a pydantic model of the SDK)
    safety: PolicyDecision | None = None


class ResultScreen:
    """See the module docstring; without a safety runtime everything passes."""

    def __init__(self, safety: SafetyRuntime | None) -> None:
        self.safety = safety

    def _policy(self, call: McpCall) -> tuple[Policy, CheckContext] | None:
        if self.safety is None:
            return None
        policy = self.safety.stage.policy_for(f"mcp/{call.server}", call.principal.team_id)
        if not policy.checks(CheckPoint.INPUT):
            return None
        ctx = CheckContext(
            stage=CheckPoint.INPUT, role="tool", alias=f"mcp/{call.server}",
            team=call.principal.team_id, key_id=call.principal.key_id,
            request_id=call.request_id,
        )  # fmt: skip
        return policy, ctx

    async def _texts(self, call: McpCall, texts: list[str | None]) -> list[str | None] | None:
        """``texts`` as the policy leaves them (None entries untouched); None: blocked."""
        found = self._policy(call)
        if found is None:
            return texts
        policy, ctx = found
        out: list[str | None] = []
        for text in texts:
            if text is None:
                out.append(None)
                continue
            decision = await policy.run(CheckPoint.INPUT, text, ctx)
            if decision.blocked:
                _flag(call, decision, "blocked")
                return None
            if decision.action is Action.MASK:
                _flag(call, decision, "masked")
                text = decision.text
            out.append(text)
        return out

    async def tool_result(
        self, call: McpCall, result: types.CallToolResult
    ) -> types.CallToolResult:
        texts = await self._texts(call, [block_text(b) for b in result.content])
        if texts is None:
            return _withheld_result(call)
        found = self._policy(call)
        if result.structured_content is not None and found is not None:
            policy, ctx = found
            raw = json.dumps(result.structured_content, ensure_ascii=False)
            decision = await policy.run(CheckPoint.INPUT, raw, ctx)
            if decision.blocked or decision.action is Action.MASK:
                # JSON cannot be masked in place without breaking its schema: withhold it all.
                _flag(call, decision, "blocked")
                return _withheld_result(call, masked=not decision.blocked)
        if call.decision != "masked":
            return result
        content = [
            b if t is None else with_text(b, t) for b, t in zip(result.content, texts, strict=True)
        ]
        return result.model_copy(update={"content": content})

    async def prompt(self, call: McpCall, result: types.GetPromptResult) -> types.GetPromptResult:
        texts = await self._texts(call, [block_text(m.content) for m in result.messages])
        if texts is None:
            raise _withheld(call)
        if call.decision != "masked":
            return result
        messages = [
            m if t is None else m.model_copy(update={"content": with_text(m.content, t)})
            for m, t in zip(result.messages, texts, strict=True)
        ]
        return result.model_copy(update={"messages": messages})

    async def resource(
        self, call: McpCall, result: types.ReadResourceResult
    ) -> types.ReadResourceResult:
        texts = await self._texts(
            call,
            [
                c.text if isinstance(c, types.TextResourceContents) else None
                for c in result.contents
            ],
        )
        if texts is None:
            raise _withheld(call)
        if call.decision != "masked":
            return result
        contents = [
            c if t is None else c.model_copy(update={"text": t})
            for c, t in zip(result.contents, texts, strict=True)
        ]
        return result.model_copy(update={"contents": contents})


def _flag(call: McpCall, decision: PolicyDecision, what: str) -> None:
    call.safety = decision
    if what == "blocked":
        call.decision, call.status, call.error_type = "blocked", 400, "content_filter"
    elif call.decision != "blocked":
        call.decision = "masked"


def _reason(call: McpCall) -> str:
    """The checks that flagged and their categories (``pii: email``): the one that blocked,
    else every one that flagged (a mask has no single blocking verdict)."""
    decision = call.safety
    if decision is None:
        return "policy"
    flagged = [decision.reason] if decision.reason is not None else []
    flagged = flagged or [v for v in decision.verdicts if v.flagged]
    named = [f"{v.check}: {', '.join(v.categories)}" if v.categories else v.check for v in flagged]
    return "; ".join(named) or "policy"


def _withheld_result(call: McpCall, *, masked: bool = False) -> types.CallToolResult:
    call.decision, call.status, call.error_type = "blocked", 400, "content_filter"
    if masked:
        text = (
            "The gateway withheld this tool result: its structured content holds data the "
            f"content policy masks ({_reason(call)}), and JSON cannot be masked in place."
        )
    else:
        text = (
            "The gateway withheld this tool result: its content policy flagged it "
            f"({_reason(call)})."
        )
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _withheld(call: McpCall) -> MCPError:
    return MCPError(
        WITHHELD, f"The gateway withheld this {call.kind}: its content policy flagged it "
        f"({_reason(call)})."
    )  # fmt: skip


def block_text(block: Any) -> str | None:
    """The text of a content block (text, or an embedded text resource); None otherwise."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource) and isinstance(
        block.resource, types.TextResourceContents
    ):
        return block.resource.text
    return None


def with_text(block: Any, text: str) -> Any:
    if isinstance(block, types.TextContent):
        return block.model_copy(update={"text": text})
    resource = block.resource.model_copy(update={"text": text})
    return block.model_copy(update={"resource": resource})


def safety_row(call: McpCall, alias: str, created_ms: int) -> dict[str, Any]:
    """The safety audit row of a flagged answer."""
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
        "verdicts": [v.to_dict() for v in decision.verdicts],
        "failed": any(v.error for v in decision.verdicts),
    }  # fmt: skip
