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

from fleetgate.safety.base import Action, CheckPoint

__all__ = [
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

    type: str
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

    input: list[str] = Field(default_factory=list)
    stream: list[str] = Field(default_factory=list)
    output: list[str] = Field(default_factory=list)
    audit: list[str] = Field(default_factory=list)
    actions: dict[str, Action] = Field(default_factory=dict)
    """Per check name: the action taken when it flags (default: the check's own)."""
    canned_reply: str = DEFAULT_CANNED_REPLY
    stream_options: StreamConfig = Field(default_factory=StreamConfig)

    def checks_for(self, stage: CheckPoint) -> list[str]:
        return list(getattr(self, stage.value))


class AuditConfig(_Strict):
    """The asynchronous audit queue shared by all policies."""

    enabled: bool = True
    queue_size: int = Field(1000, ge=1)
    workers: int = Field(2, ge=1)
    webhook_url: str | None = None
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

    enabled: bool = True
    checks: dict[str, CheckConfig] = Field(default_factory=_default_checks)
    policies: dict[str, PolicyConfig] = Field(default_factory=_default_policies)
    default_policy: str = "default"
    aliases: dict[str, str] = Field(default_factory=dict)
    teams: dict[str, str] = Field(default_factory=dict)
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
