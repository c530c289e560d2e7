"""Evaluation suites: JSONL files, one item a line.

An item (every field but ``id`` and the prompt is optional)::

    {"id": "g-001", "kind": "golden", "prompt": "What is 2+2?", "expected": "4",
     "scorer": "numeric", "tolerance": 0}
    {"id": "rt-01", "kind": "red-team", "messages": [{"role": "user", "content": "..."}]}

- ``kind``: ``golden`` (default), ``fix`` (known bad cases that were fixed), ``red-team``,
  ``regression``, ``multimodal`` (its ``messages`` carry image parts);
- the prompt: ``prompt`` (one user message) or ``messages`` (OpenAI chat messages);
- ``scorer``: ``exact``, ``contains``, ``regex``, ``json-schema`` (``schema``), ``numeric``
  (``tolerance``, absolute), ``refusal``, ``judge`` (another model grades the answer:
  ``judge`` names it, else the runner's ``--judge``; ``judge_prompt`` is its prompt, with
  ``{prompt}``, ``{answer}``, ``{expected}``, ``{rejected}`` and ``{comment}`` filled in; by
  default `fleetgate.releases.judge.DEFAULT_PROMPT`); by default ``refusal`` for red-team items
  and ``exact`` for the others;
- ``rejected``, ``comment``, ``source``: an answer users rejected, what they said, and where
  the item came from (``fleetgate flywheel export`` writes them; the judge sees the first two);
- ``max_tokens`` (default 256).

The suite's digest (sha256 of its items, canonical JSON) ties runs of the same items together:
a comparison or a gate only pairs runs with the same digest.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fleetgate.errors import ConfigError

__all__ = ["EvalItem", "Kind", "ScorerName", "Suite", "load_suite", "parse_suite"]

Kind = Literal["golden", "fix", "red-team", "regression", "multimodal"]
ScorerName = Literal["exact", "contains", "regex", "json-schema", "numeric", "refusal", "judge"]


class EvalItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=200)
    kind: Kind = "golden"
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    expected: Any = None
    scorer: ScorerName | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    tolerance: float = Field(0.0, ge=0)
    max_tokens: int = Field(256, ge=1, le=32768)
    judge: str | None = Field(None, min_length=1, max_length=200)
    judge_prompt: str | None = Field(None, min_length=1, max_length=20000)
    rejected: str | None = None
    comment: str | None = None
    source: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check(self) -> EvalItem:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' and 'messages'")
        scorer = self.how
        if scorer in ("exact", "contains", "regex") and not isinstance(self.expected, str):
            raise ValueError(f"scorer {scorer} needs 'expected' as a string")
        if scorer == "numeric" and not isinstance(self.expected, int | float):
            raise ValueError("scorer numeric needs 'expected' as a number")
        if (
            scorer == "judge"
            and self.judge_prompt is not None
            and "{answer}" not in (self.judge_prompt)
        ):
            raise ValueError("'judge_prompt' must contain {answer}")
        if scorer == "json-schema" and self.schema_ is None:
            raise ValueError("scorer json-schema needs 'schema'")
        if scorer == "regex":
            try:
                re.compile(str(self.expected))
            except re.error as exc:
                raise ValueError(f"'expected' is not a valid regex: {exc}") from None
        return self

    @property
    def how(self) -> ScorerName:
        """The scorer used (the default follows the kind)."""
        if self.scorer is not None:
            return self.scorer
        return "refusal" if self.kind == "red-team" else "exact"

    def chat_messages(self) -> list[dict[str, Any]]:
        if self.messages is not None:
            return self.messages
        return [{"role": "user", "content": self.prompt}]


@dataclass(frozen=True)
class Suite:
    name: str
    items: tuple[EvalItem, ...]
    digest: str


def parse_suite(name: str, text: str) -> Suite:
    """A suite from JSONL text; `ConfigError` naming the line of the first bad item."""
    items: list[EvalItem] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            item = EvalItem.model_validate(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{name}:{number}: not JSON: {exc}") from None
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ConfigError(f"{name}:{number}: {where or 'item'}: {err['msg']}") from None
        if item.id in seen:
            raise ConfigError(f"{name}:{number}: duplicate id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise ConfigError(f"{name}: the suite has no items")
    canonical = b"\n".join(
        orjson.dumps(i.model_dump(by_alias=True), option=orjson.OPT_SORT_KEYS)
        for i in sorted(items, key=lambda i: i.id)
    )
    return Suite(name, tuple(items), hashlib.sha256(canonical).hexdigest()[:32])


def load_suite(path: Path) -> Suite:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the suite {path}: {exc.strerror}") from None
    return parse_suite(path.name, text)
