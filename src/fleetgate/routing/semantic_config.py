"""The ``semantic:`` section of the gateway config: the intent router's alias and intents.

Example (YAML)::

    semantic:
      alias: auto                 # what clients send as "model"
      default_intent: chitchat    # used when nothing scores above min_score
      min_score: 0.4
      intents:                    # rules are tried in this order; the first match wins
        code: {alias: smart, reasoning: true}
        math: {alias: smart, reasoning: true}
        retrieval: {alias: fast, retrieval: true}
        reasoning: {alias: smart, reasoning: true}
        chitchat: {alias: fast, keywords: ["how are you"], examples: ["what's up?"]}
      reasoning_styles:           # how each target alias is told to think (or not)
        smart:
          enable: {chat_template_kwargs: {enable_thinking: true}}
          disable: {chat_template_kwargs: {enable_thinking: false}}
        o-mini: {enable: {reasoning_effort: high}, disable: {reasoning_effort: low}}

The shipped example set and keyword rules (``fleetgate/routing/data/``) cover the intents
``chitchat``, ``code``, ``math``, ``reasoning`` and ``retrieval`` in English and Chinese; an
intent with another name needs its own ``examples`` (and may add ``keywords``/``patterns``).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.sections import OptionalSection

__all__ = ["SEMANTIC_SECTION", "IntentConfig", "ReasoningStyle", "SemanticConfig"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntentConfig(_Model):
    """One intent: where it goes, and whether it wants reasoning and retrieval."""

    # the configured alias the intent routes to
    alias: str = Field(min_length=1)
    # turn the target's reasoning on (`reasoning_styles`); other intents turn it off
    reasoning: bool = False
    # mark the request as wanting retrieved context (read by later stages)
    retrieval: bool = False
    keywords: tuple[str, ...] = ()  # case-insensitive substrings
    patterns: tuple[str, ...] = ()  # case-insensitive regular expressions
    examples: tuple[str, ...] = ()  # added to the shipped examples of this intent

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for p in value:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"pattern {p!r} is not a regular expression: {exc}") from None
        return value


class ReasoningStyle(_Model):
    """Body fields that turn a target alias's reasoning on or off (merged, client wins)."""

    # fields merged into the body when the intent wants reasoning
    enable: dict[str, Any] = Field(default_factory=dict)
    # fields merged into the body when it does not
    disable: dict[str, Any] = Field(default_factory=dict)


class SemanticConfig(_Model):
    """The intent router (see the module docstring for an example)."""

    # the virtual alias clients send as `model`; must not be a configured alias
    alias: str = Field("auto", min_length=1, pattern=r"^[A-Za-z0-9._:/@-]+$")
    # intents in rule order, at least one
    intents: dict[str, IntentConfig] = Field(min_length=1)
    default_intent: str | None = None  # the first intent when unset
    # lowest classifier probability that decides (0-1)
    min_score: float = Field(0.0, ge=0, le=1)
    # train on the shipped example sentences too
    shipped_examples: bool = True
    # use the shipped keyword rules too
    shipped_rules: bool = True
    examples_path: str | None = None  # extra JSON lines: {"intent": ..., "text": ...}
    # per target alias, the body fields that turn its reasoning on and off
    reasoning_styles: dict[str, ReasoningStyle] = Field(default_factory=dict)
    max_chars: int = Field(1000, ge=16)  # of the last user message, to classify
    # tokens the encoder reads (8-512)
    max_tokens: int = Field(128, ge=8, le=512)
    quantize: bool = True  # int8 dynamic quantisation of the encoder (about 3x faster on CPU)
    threads: int = Field(1, ge=1, le=64)  # torch intra-op threads (process-wide)
    # messages encoded together when requests arrive at once
    batch_max: int = Field(16, ge=1, le=256)
    load_wait_s: float = Field(30.0, ge=0)  # a request waits this long for the model to load

    @model_validator(mode="after")
    def _default_known(self) -> SemanticConfig:
        if self.default_intent is not None and self.default_intent not in self.intents:
            raise ValueError(f"default_intent {self.default_intent!r} is not an intent")
        return self

    @property
    def fallback_intent(self) -> str:
        return self.default_intent or next(iter(self.intents))

    def check_aliases(self, known: set[str]) -> None:
        """Raise `ValueError` unless every alias named here is configured (and ours is not)."""
        if self.alias in known:
            raise ValueError(f"semantic.alias {self.alias!r} is also a configured model alias")
        for name, intent in self.intents.items():
            if intent.alias not in known:
                raise ValueError(
                    f"semantic.intents.{name}.alias {intent.alias!r} is not a configured alias"
                )
        for alias in self.reasoning_styles:
            if alias not in known:
                raise ValueError(f"semantic.reasoning_styles: {alias!r} is not a configured alias")


def _check_aliases(section: SemanticConfig, config: GatewayConfig) -> None:
    section.check_aliases({m.alias for m in config.models})


SEMANTIC_SECTION = OptionalSection(
    "semantic",
    SemanticConfig,
    check=_check_aliases,
    reload={"": "restart"},  # the intent router's stage is built at start
    presence_restart=("",),
)
"""The ``semantic`` section: the intent router; absent: no router (``model: auto`` unknown)."""
