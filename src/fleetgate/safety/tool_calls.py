"""The safety stage on a call to a tool server (`fleetgate.contract.tool.ToolCall`, an MCP
tool call, prompt or resource read), under the caller's policy (the team's, else the one of
the alias ``mcp/<server>``, else the default):

- **arguments**, before the call: the *input* checks. A block refuses the call (400
  ``content_filter``; the tool never runs, and the audit keeps no arguments). A mask rewrites
  the copy the request audit keeps (``req.body``); the tool gets its arguments as sent, since
  a masked argument would change what the tool does (where a message goes, what is looked up).
- **the answer**, before anyone sees it (a `fleetgate.contract.tool.ToolResultFilter`): it is
  about to enter a model's context like a user's message, so its text passes the *input*
  checks (indirect prompt injection), and it is what this request returns, so it passes the
  *output* checks too. A block withholds the whole answer; a mask rewrites the flagged spans;
  structured output (JSON) cannot be masked in place, so any flag there withholds it all.

Every flagged decision of one call goes into one record of the guardrail events (the safety
audit log, ``fg_safety_audit``), named by the request id.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable
from typing import Any

from fleetgate.contract.request import GatewayRequest
from fleetgate.contract.tool import ToolCall, ToolResult
from fleetgate.safety.audit import AuditItem, AuditRecord
from fleetgate.safety.base import Action, CheckContext, CheckPoint, PolicyDecision
from fleetgate.safety.policy import Policy

__all__ = ["ToolCallChecks", "flagged_reason"]

_FLAGS = "safety.tool_flags"  # req.state: the call's flagged decisions, for its record
Events = Callable[[AuditRecord], Any]  # a guardrail events sink (may return an awaitable)


def flagged_reason(decision: PolicyDecision) -> str:
    """The checks that flagged and their categories (``pii: email``): the one that blocked,
    else every one that flagged (a mask has no single blocking verdict)."""
    flagged = [decision.reason] if decision.reason is not None else []
    flagged = flagged or [v for v in decision.verdicts if v.flagged]
    named = [f"{v.check}: {', '.join(v.categories)}" if v.categories else v.check for v in flagged]
    return "; ".join(named) or "policy"


def _context(req: GatewayRequest, point: CheckPoint, role: str) -> CheckContext:
    p = req.principal
    return CheckContext(
        stage=point, role=role, alias=req.alias, team=p.team_id, key_id=p.key_id,
        request_id=req.request_id,
    )  # fmt: skip


def _answer_context(req: GatewayRequest, point: CheckPoint) -> CheckContext:
    """The answer is a tool's message to the model at the input check point, and this
    request's reply (as a model's answer is) at the output check point."""
    return _context(req, point, "tool" if point is CheckPoint.INPUT else "assistant")


def _flag(req: GatewayRequest, decision: PolicyDecision) -> None:
    flags: list[PolicyDecision] = req.state.setdefault(_FLAGS, [])
    flags.append(decision)


class _AnswerFilter:
    """The input and output checks over a tool server's answer (module docstring)."""

    __slots__ = ("points", "policy", "req")

    def __init__(self, policy: Policy, req: GatewayRequest, points: tuple[CheckPoint, ...]):
        self.policy = policy
        self.req = req
        self.points = points

    async def _run(self, text: str) -> tuple[str, PolicyDecision | None, bool]:
        """(text as the checks leave it, the decision that blocked, whether one masked)."""
        masked = False
        for point in self.points:
            decision = await self.policy.run(point, text, _answer_context(self.req, point))
            if decision.blocked:
                _flag(self.req, decision)
                return text, decision, masked
            if decision.action is Action.MASK:
                _flag(self.req, decision)
                text, masked = decision.text, True
        return text, None, masked

    async def check(self, call: ToolCall, result: ToolResult) -> None:
        for i, text in enumerate(result.texts):
            if text is None:
                continue
            checked, blocked, masked = await self._run(text)
            if blocked is not None:
                result.withheld = flagged_reason(blocked)
                return
            if masked:
                result.texts[i], result.masked = checked, True
        if result.structured is None:
            return
        for point in self.points:
            ctx = _answer_context(self.req, point)
            decision = await self.policy.run(point, result.structured, ctx)
            if decision.blocked or decision.action is Action.MASK:
                # JSON cannot be masked in place without breaking its schema: withhold it all.
                _flag(self.req, decision)
                result.withheld = flagged_reason(decision)
                result.unmaskable = not decision.blocked
                return


class ToolCallChecks:
    """The safety stage's part for tool calls; ``policy_for(alias, team_id)`` is the stage's
    policy lookup, ``events`` where flagged calls are recorded (None: nowhere)."""

    def __init__(
        self, policy_for: Callable[[str, str | None], Policy], events: Events | None = None
    ) -> None:
        self.policy_for = policy_for
        self.events = events
        self._writing: set[asyncio.Future[Any]] = set()  # records an async sink still writes

    async def before(self, req: GatewayRequest, call: ToolCall) -> None:
        policy = self.policy_for(req.alias, req.principal.team_id)
        if call.arguments and policy.checks(CheckPoint.INPUT):
            await self._arguments(req, call, policy)
        points = tuple(p for p in (CheckPoint.INPUT, CheckPoint.OUTPUT) if policy.checks(p))
        if points:
            call.filters.append(_AnswerFilter(policy, req, points))

    async def _arguments(self, req: GatewayRequest, call: ToolCall, policy: Policy) -> None:
        text = json.dumps(call.arguments, ensure_ascii=False)
        ctx = _context(req, CheckPoint.INPUT, "user")
        decision = await policy.run(CheckPoint.INPUT, text, ctx)
        if decision.blocked:
            _flag(req, decision)
            req.body = {call.kind: call.name}  # what the audit keeps: not what was blocked
            req.outcome.decision = "blocked"
            self.after(req)  # the stage's ``after`` does not run for a ``before`` that raised
            decision.raise_if_blocked()
        if decision.action is Action.MASK:
            _flag(req, decision)
            req.body = {call.kind: call.name, "arguments": _parsed(decision.text)}
            req.outcome.decision = "masked"  # audited as masked (blocked, should the answer be)

    def after(self, req: GatewayRequest) -> None:
        """One guardrail-events record of the call's flagged decisions, if any."""
        flags: list[PolicyDecision] | None = req.state.pop(_FLAGS, None)
        if not flags or self.events is None:
            return
        p = req.principal
        item = AuditItem(
            messages=(), key_id=p.key_id, team=p.team_id, alias=req.alias,
            request_id=req.request_id, created_at=req.received_at or time.time(),
        )  # fmt: skip
        written = self.events(AuditRecord(item, tuple(v for d in flags for v in d.verdicts)))
        if inspect.isawaitable(written):  # a file sink appends in a thread: keep the task
            task = asyncio.ensure_future(written)
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)


def _parsed(text: str) -> Any:
    """Masked arguments as JSON again; the masked text itself if the mask broke the JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
