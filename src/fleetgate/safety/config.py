"""Safety configuration: the ``safety:`` section of the fleetgate YAML config.

Example::

    safety:
      checks:                       # named check instances; 'type' picks a registered check
        words: {type: words}
        pii: {type: pii, options: {mode: mask}}
        classifier: {type: classifier, options: {threshold: 0.5}}
        guard:
          type: llama_guard
          options: {base_url: "http://guard:8000/v1", model: llama-guard-3}
      policies:
        default:
          input: [words, pii, classifier]
          stream: [words, pii]
          output: [words, pii]
          audit: [guard]
        compliance:
          input: [words, pii, classifier]
          actions: {pii: block}      # what to do when a check flags: allow (log only), mask, block
          canned_reply: "This request can't be processed under the compliance policy."
          stream_options: {interval_tokens: 20, hold_back: true}
      aliases: {fast-small: default}
      teams: {finance: compliance}
      audit: {queue_size: 1000, workers: 2, suspend_after: 5, webhook_url: "https://alerts/..."}

A team's policy wins over an alias's; both fall back to ``default_policy``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fleetgate.config.sections import OptionalSection
from fleetgate.safety.base import Action, CheckPoint

__all__ = [
    "SAFETY_SECTION",
    "AuditConfig",
    "CheckConfig",
    "PolicyConfig",
    "SafetyConfig",
    "StreamConfig",
]

DEFAULT_CANNED_REPLY = "Sorry, I can't help with that request."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckConfig(_Strict):
    """One named check: a registered ``type`` and its options."""

    # the registered check type (words, pii, classifier, llama_guard, cascade, ...)
    type: str
    # the check type's own options
    options: dict[str, Any] = Field(default_factory=dict)
    on_error: Literal["allow", "block"] = "allow"
    """Fail open (``allow``, counted) or closed (``block``) when the check cannot decide."""


class StreamConfig(_Strict):
    """Incremental moderation of streamed output."""

    interval_tokens: int = Field(50, ge=1)
    """Run the stream checks after every this many (estimated) tokens."""
    first_interval_tokens: int = Field(16, ge=1)
    """The first check comes after this many tokens and the interval then doubles up to
    ``interval_tokens``, so with hold-back the first text waits 16 tokens, not 50."""
    window_tokens: int = Field(200, ge=1)
    """How much already-released text each check sees besides the new text."""
    hold_back: bool = True
    """Release text only after a check covering it passed."""
    margin_chars: int = Field(48, ge=0)
    """Held back past a passed check, so a phrase split across two checks is never half shown."""


class PolicyConfig(_Strict):
    """Which checks run at which stage, and what happens when one flags."""

    # checks run on the request before it is sent
    input: list[str] = Field(default_factory=list)
    # checks run on streamed output as it arrives
    stream: list[str] = Field(default_factory=list)
    # checks run on a whole (non-streamed) answer
    output: list[str] = Field(default_factory=list)
    # checks run after the answer, off the request path, by the audit queue
    audit: list[str] = Field(default_factory=list)
    actions: dict[str, Action] = Field(default_factory=dict)
    """Per check name: the action taken when it flags (default: the check's own)."""
    # the answer a blocked request or reply gets instead
    canned_reply: str = DEFAULT_CANNED_REPLY
    # how streamed output is checked
    stream_options: StreamConfig = Field(default_factory=StreamConfig)

    def checks_for(self, stage: CheckPoint) -> list[str]:
        return list(getattr(self, stage.value))


class AuditConfig(_Strict):
    """The asynchronous audit queue shared by all policies."""

    # run the audit queue (read at start)
    enabled: bool = True
    # answers waiting for audit at most; past it the newest are dropped and counted
    queue_size: int = Field(1000, ge=1)
    # audit tasks running at once
    workers: int = Field(2, ge=1)
    # URL that receives one POST per audit violation
    webhook_url: str | None = None
    # time limit of one webhook POST
    webhook_timeout_s: float = Field(5.0, gt=0)
    suspend_after: int | None = Field(None, ge=1)
    """Suspend a key after this many audit violations (None: never)."""


def _default_checks() -> dict[str, CheckConfig]:
    return {
        "words": CheckConfig(type="words"),
        "pii": CheckConfig(type="pii", options={"mode": "mask"}),
        "classifier": CheckConfig(type="classifier"),
    }


def _default_policies() -> dict[str, PolicyConfig]:
    return {
        "default": PolicyConfig(
            input=["words", "pii", "classifier"], stream=["words", "pii"], output=["words", "pii"]
        )
    }


class SafetyConfig(_Strict):
    """The whole ``safety:`` section."""

    # run the guardrails; off: the section is kept but no check runs (read at start)
    enabled: bool = True
    # named check instances, by name
    checks: dict[str, CheckConfig] = Field(default_factory=_default_checks)
    # named policies: which checks run at which stage
    policies: dict[str, PolicyConfig] = Field(default_factory=_default_policies)
    # the policy of aliases and teams mapped to none
    default_policy: str = "default"
    # the policy of each alias, by alias
    aliases: dict[str, str] = Field(default_factory=dict)
    # the policy of each team, by team id (a team's wins over an alias's)
    teams: dict[str, str] = Field(default_factory=dict)
    # the asynchronous audit queue shared by all policies
    audit: AuditConfig = Field(default_factory=AuditConfig)

    @model_validator(mode="after")
    def _references_exist(self) -> SafetyConfig:
        if self.default_policy not in self.policies:
            raise ValueError(f"default_policy {self.default_policy!r} is not in policies")
        for where, mapping in (("aliases", self.aliases), ("teams", self.teams)):
            for key, target in mapping.items():
                if target not in self.policies:
                    raise ValueError(f"{where}.{key}: unknown policy {target!r}")
        for pname, policy in self.policies.items():
            for stage in CheckPoint:
                for check in policy.checks_for(stage):
                    if check not in self.checks:
                        raise ValueError(f"policies.{pname}.{stage.value}: unknown check {check!r}")
            for check in policy.actions:
                if check not in self.checks:
                    raise ValueError(f"policies.{pname}.actions: unknown check {check!r}")
        return self

    def policy_name(self, *, alias: str | None = None, team: str | None = None) -> str:
        """The policy for a request: the team's, else the alias's, else the default."""
        if team is not None and team in self.teams:
            return self.teams[team]
        if alias is not None and alias in self.aliases:
            return self.aliases[alias]
        return self.default_policy


SAFETY_SECTION = OptionalSection(
    "safety",
    SafetyConfig,
    # checks and policies live (SafetyRuntime.set_base); the audit queue is started once
    reload={"": "live", "enabled": "restart", "audit": "restart"},
    presence_restart=("",),
)
"""The ``safety`` section: guardrails; absent: no safety stage."""
