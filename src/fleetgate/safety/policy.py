"""Policies at run time: which checks run at each check point and what their verdicts mean.

``Guardrails`` builds every configured check once and hands out a :class:`Policy` per request::

    guardrails = Guardrails(settings.safety, metrics=SafetyMetrics(registry))
    policy = guardrails.policy_for(alias="fast-small", team="finance")
    decision = await policy.run(CheckPoint.INPUT, prompt_text, CheckContext(key_id=key.id))
    decision.raise_if_blocked()        # ContentBlocked -> 400 code=content_filter
    prompt_text = decision.text        # masked if a check masked
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from fleetgate.safety.base import (
    Action,
    Check,
    CheckContext,
    CheckPoint,
    PolicyDecision,
    Verdict,
    close_check,
)
from fleetgate.safety.config import PolicyConfig, SafetyConfig, StreamConfig
from fleetgate.safety.metrics import SafetyMetrics
from fleetgate.safety.registry import CheckRegistry, builtin_registry
from fleetgate.safety.stream import StreamModerator

__all__ = ["Guardrails", "Policy", "PolicyCheck"]

log = logging.getLogger("fleetgate.safety")


@dataclass(frozen=True, slots=True)
class PolicyCheck:
    """A check as a policy uses it: the action on a flag and the fail mode."""

    check: Check
    action: Action | None = None
    on_error: Action = Action.ALLOW


@dataclass(slots=True)
class Policy:
    """The checks per check point, canned reply and stream settings of one named policy."""

    name: str
    stages: Mapping[CheckPoint, Sequence[PolicyCheck]]
    canned_reply: str
    stream: StreamConfig = field(default_factory=StreamConfig)
    metrics: SafetyMetrics | None = None

    def checks(self, stage: CheckPoint) -> Sequence[PolicyCheck]:
        return self.stages.get(stage, ())

    async def _one(self, pc: PolicyCheck, text: str, ctx: CheckContext) -> Verdict:
        try:
            verdict = await pc.check.check(text, ctx)
        except Exception as exc:  # a third-party check must never fail the request
            log.exception("safety check %s raised", pc.check.name)
            verdict = Verdict.failed(pc.check.name, f"check raised {exc!r}"[:300])
        if verdict.error:
            return verdict.with_action(pc.on_error)
        if verdict.flagged and pc.action is not None:
            action = pc.action
            if action is Action.MASK and verdict.masked_text is None:
                action = Action.BLOCK  # a check that cannot mask blocks instead
            return verdict.with_action(action)
        return verdict

    async def run(
        self, stage: CheckPoint, text: str, ctx: CheckContext | None = None
    ) -> PolicyDecision:
        """Run the check point's checks in order; masks feed into later checks, a block stops."""
        ctx = replace(ctx, stage=stage) if ctx is not None else CheckContext(stage=stage)
        verdicts: list[Verdict] = []
        action = Action.ALLOW
        for pc in self.checks(stage):
            verdict = await self._one(pc, text, ctx)
            verdicts.append(verdict)
            if self.metrics is not None:
                self.metrics.record(stage, verdict)
            if verdict.action is Action.BLOCK:
                return PolicyDecision(
                    Action.BLOCK, text, tuple(verdicts), verdict, self.canned_reply
                )
            if verdict.action is Action.MASK and verdict.masked_text is not None:
                text = verdict.masked_text
                action = Action.MASK
        return PolicyDecision(action, text, tuple(verdicts), None, self.canned_reply)

    def stream_moderator(self, ctx: CheckContext | None = None) -> StreamModerator:
        """A moderator for one streamed reply, running this policy's stream checks."""
        base = ctx or CheckContext()
        stream_ctx = replace(base, stage=CheckPoint.STREAM, role="assistant")

        async def run(text: str) -> PolicyDecision:
            return await self.run(CheckPoint.STREAM, text, stream_ctx)

        def on_stop(verdict: Verdict | None) -> None:
            if self.metrics is not None:
                self.metrics.stream_stops.labels(verdict.check if verdict else "policy").inc()

        return StreamModerator(
            run, self.stream, canned_reply=self.canned_reply, on_stop=on_stop,
            enabled=bool(self.checks(CheckPoint.STREAM)),
        )  # fmt: skip


class Guardrails:
    """Builds the configured checks once (through the registry) and resolves policies."""

    def __init__(
        self,
        config: SafetyConfig,
        *,
        registry: CheckRegistry | None = None,
        metrics: SafetyMetrics | None = None,
        checks: Mapping[str, Check] | None = None,
    ) -> None:
        """``checks`` pre-built instances override configured ones by name (tests, embedding)."""
        self.config = config
        registry = registry or builtin_registry()
        self.metrics = metrics
        self.checks: dict[str, Check] = dict(checks or {})
        used = {n for p in config.policies.values() for s in CheckPoint for n in p.checks_for(s)}
        for name in sorted(used):
            if name not in self.checks:
                self.checks[name] = registry.create(name, config.checks[name])
        if metrics is not None:
            for check in self.checks.values():
                bind = getattr(check, "bind_metrics", None)
                if bind is not None:
                    bind(metrics)
        self._policies = {n: self._build(n, p) for n, p in config.policies.items()}

    def _build(self, name: str, pc: PolicyConfig) -> Policy:
        stages = {
            stage: tuple(
                PolicyCheck(
                    self.checks[c], pc.actions.get(c), Action(self.config.checks[c].on_error)
                )
                for c in pc.checks_for(stage)
            )
            for stage in CheckPoint
        }
        return Policy(name, stages, pc.canned_reply, pc.stream_options, self.metrics)

    def policy(self, name: str) -> Policy:
        return self._policies[name]

    def policy_for(self, *, alias: str | None = None, team: str | None = None) -> Policy:
        """The policy for a request: the team's, else the alias's, else the default."""
        return self._policies[self.config.policy_name(alias=alias, team=team)]

    async def warm_up(self) -> None:
        """Load models now (call in the app's startup) instead of on the first request."""
        for check in self.checks.values():
            warm = getattr(check, "warm_up", None)
            if warm is not None:
                await warm()

    async def aclose(self) -> None:
        """Close clients and worker threads of the checks."""
        for check in self.checks.values():
            await close_check(check)
