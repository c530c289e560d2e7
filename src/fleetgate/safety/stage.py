"""The safety stage of the request path (``fleetgate.contract.stages.Stage``).

Built by `fleetgate.safety.runtime.SafetyRuntime` (the `safety` feature), after the
multimodal stage::

    guardrails = Guardrails(safety_config, metrics=SafetyMetrics(registry))
    audit = AuditQueue([], metrics=..., sink=audit_log.write, ...)   # started by the feature
    stage = SafetyStage(guardrails, audit)

``before``: input checks on what is new in this turn (the last user message and tool results
after the last assistant message; older turns were checked when they were sent) -- a block raises
``ContentBlocked`` (400 ``content_filter``), a mask rewrites the body; then adds a stream filter
(stream checks) or a response filter (output checks). ``after``: queues the exchange for the
policy's audit checks. A call to a tool server (``req.tool``) is checked by
`fleetgate.safety.tool_calls`: its arguments before, its answer before anyone sees it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fleetgate.contract.request import Endpoint, FilterResult, GatewayRequest, Outcome
from fleetgate.messages_text import content_text
from fleetgate.safety.audit import AuditItem, AuditQueue
from fleetgate.safety.base import Action, CheckContext, CheckPoint, TextTurn
from fleetgate.safety.policy import Guardrails, Policy
from fleetgate.safety.stream import Release, StreamModerator
from fleetgate.safety.tool_calls import Events, ToolCallChecks

__all__ = ["SafetyResponseFilter", "SafetyStage", "SafetyStreamFilter"]

_STATE = "safety"


def _text(content: Any) -> str:
    return content_text(content, coerce=True)


def _turns(messages: list[dict[str, Any]]) -> list[TextTurn]:
    out = []
    for m in messages:
        role = "assistant" if m.get("role") == "assistant" else "user"
        text = _text(m.get("content"))
        if text:
            out.append(TextTurn(role, text))
    return out


def _new_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages after the last assistant turn that carry user or tool text."""
    last_assistant = max(
        (i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1
    )
    return [m for m in messages[last_assistant + 1 :] if m.get("role") in ("user", "tool")]


class SafetyStreamFilter:
    """Runs a :class:`StreamModerator` over the text of choice 0 of a chat stream."""

    def __init__(self, moderator: StreamModerator) -> None:
        self.moderator = moderator
        self._template: dict[str, Any] = {"object": "chat.completion.chunk"}
        self._seen_first = False

    def _chunk(self, content: str | None, finish_reason: str | None = None) -> dict[str, Any]:
        delta = {"content": content} if content is not None else {}
        return {
            **self._template,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    def _stopped(self, out: list[dict[str, Any]], rel: Release) -> FilterResult:
        return FilterResult([*out, self._chunk(rel.reply, "content_filter")], stop=True)

    async def feed(self, chunk: dict[str, Any]) -> FilterResult:
        if not self._seen_first:
            self._seen_first = True
            self._template = {
                k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk
            }
        choices = [c for c in chunk.get("choices") or () if isinstance(c, dict)]
        first = next((c for c in choices if c.get("index", 0) == 0), None)
        if first is None:
            return FilterResult([chunk])
        raw = first.get("delta")
        delta: dict[str, Any] = raw if isinstance(raw, dict) else {}
        text = delta.get("content")
        out: list[dict[str, Any]] = []
        if isinstance(text, str) and text:
            rel = await self.moderator.push(text)
            if rel.stopped:
                return self._stopped(out, rel)
            if rel.text or len(delta) > 1:
                rewritten = copy.deepcopy(chunk)
                mine = rewritten["choices"][chunk["choices"].index(first)]
                mine["delta"]["content"] = rel.text
                mine["finish_reason"] = None
                out.append(rewritten)
        elif not first.get("finish_reason"):
            out.append(chunk)  # role-only or tool-call chunk
        if first.get("finish_reason"):
            rel = await self.moderator.finish()
            if rel.stopped:
                return self._stopped(out, rel)
            if rel.text:
                out.append(self._chunk(rel.text))
            out.append(self._chunk(None, str(first["finish_reason"])))
        return FilterResult(out)

    async def finish(self) -> FilterResult:
        rel = await self.moderator.finish()
        if rel.stopped:
            return self._stopped([], rel)
        return FilterResult([self._chunk(rel.text)] if rel.text else [])


class SafetyResponseFilter:
    """Output checks on a whole chat response: mask in place, or replace with the canned reply."""

    def __init__(self, policy: Policy, ctx: CheckContext) -> None:
        self.policy = policy
        self.ctx = ctx

    async def apply(self, response: dict[str, Any]) -> dict[str, Any]:
        for choice in response.get("choices") or ():
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict) or not isinstance(message.get("content"), str):
                continue
            decision = await self.policy.run(CheckPoint.OUTPUT, message["content"], self.ctx)
            if decision.blocked:
                message["content"] = decision.canned_reply
                choice["finish_reason"] = "content_filter"
            elif decision.action is Action.MASK:
                message["content"] = decision.text
        return response


class SafetyStage:
    """Guardrails on the request path; see the module docstring."""

    name = "safety"

    def __init__(
        self,
        guardrails: Guardrails,
        audit: AuditQueue | None = None,
        *,
        team_name: Callable[[str], str | None] | None = None,
        events: Events | None = None,
    ) -> None:
        """``team_name`` maps a team id to its name, so policies may name teams either way;
        ``events``: where flagged tool calls are recorded (`fleetgate.safety.tool_calls`).

        ``guardrails`` may be replaced at any time (a policy change); each request uses the
        one in place when it started."""
        self.guardrails = guardrails
        self.audit = audit
        self.team_name = team_name
        self.tool_calls = ToolCallChecks(self.policy_for, events)

    def policy_for(self, alias: str, team_id: str | None) -> Policy:
        """The team's policy (by id, then by name), else the alias's, else the default."""
        guardrails = self.guardrails
        team = team_id
        if team_id is not None and team_id not in guardrails.config.teams and self.team_name:
            team = self.team_name(team_id) or team_id
        return guardrails.policy_for(alias=alias, team=team)

    async def _check_input(
        self, policy: Policy, messages: list[dict[str, Any]], ctx: CheckContext
    ) -> None:
        for message in _new_messages(messages):
            content = message.get("content")
            decision = await policy.run(CheckPoint.INPUT, _text(content), ctx)
            decision.raise_if_blocked()
            if decision.action is not Action.MASK:
                continue
            if isinstance(content, str):
                message["content"] = decision.text
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and part.get("type") == "text":
                        part["text"] = (
                            await policy.run(CheckPoint.INPUT, str(part.get("text", "")), ctx)
                        ).text

    async def before(self, req: GatewayRequest) -> None:
        if req.tool is not None:  # a call to a tool server: its arguments and its answer
            await self.tool_calls.before(req, req.tool)
            return
        if req.endpoint is not Endpoint.CHAT or not isinstance(req.body.get("messages"), list):
            return
        policy = self.policy_for(req.alias, req.principal.team_id)
        messages: list[dict[str, Any]] = req.body["messages"]
        turns = _turns(messages)
        ctx = CheckContext(
            stage=CheckPoint.INPUT, role="user", history=tuple(turns[:-1]), alias=req.alias,
            team=req.principal.team_id, key_id=req.principal.key_id, request_id=req.request_id,
        )  # fmt: skip
        if policy.checks(CheckPoint.INPUT):
            await self._check_input(policy, messages, ctx)
        out_ctx = CheckContext(
            stage=CheckPoint.OUTPUT, role="assistant", history=tuple(_turns(messages)),
            alias=req.alias, team=req.principal.team_id, key_id=req.principal.key_id,
            request_id=req.request_id,
        )  # fmt: skip
        if req.stream and policy.checks(CheckPoint.STREAM):
            req.stream_filters.append(SafetyStreamFilter(policy.stream_moderator(out_ctx)))
        elif not req.stream and policy.checks(CheckPoint.OUTPUT):
            req.response_filters.append(SafetyResponseFilter(policy, out_ctx))
        if self.audit is not None and policy.checks(CheckPoint.AUDIT):
            req.capture_response = True
            req.state[_STATE] = (policy, _turns(messages))

    def after(self, req: GatewayRequest, outcome: Outcome) -> None:
        if req.tool is not None:
            self.tool_calls.after(req)
            return
        saved = req.state.get(_STATE)
        if self.audit is None or saved is None or not outcome.response_text:
            return
        policy, turns = saved
        self.audit.submit(
            AuditItem(
                messages=[*turns, TextTurn("assistant", outcome.response_text)],
                key_id=req.principal.key_id,
                team=req.principal.team_id,
                alias=req.alias,
                request_id=req.request_id,
                checks=[pc.check for pc in policy.checks(CheckPoint.AUDIT)],
            )  # fmt: skip
        )
