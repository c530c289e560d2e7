"""Labelled training texts and how they are read from JSONL files."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fleetgate.errors import ConfigError

__all__ = ["BENIGN", "Example", "load_examples", "parse_lines"]

BENIGN = "benign"


@dataclass(frozen=True, slots=True)
class Example:
    """One labelled training text (label ``benign`` or a harm category)."""

    text: str
    label: str


def parse_lines(lines: Iterable[str], source: str) -> list[Example]:
    """Examples from JSON lines of ``{"text", "label"}`` (or ``{"prompt", "category"}``)."""
    out: list[Example] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text = row.get("text", row.get("prompt"))
            label = row.get("label", row.get("category"))
        except (json.JSONDecodeError, AttributeError) as exc:
            raise ConfigError(f"{source}:{n}: not a JSON object: {exc}") from exc
        if not isinstance(text, str) or not isinstance(label, str):
            raise ConfigError(f"{source}:{n}: needs string 'text' and 'label'")
        out.append(Example(text, label))
    return out


def load_examples(path: str | Path) -> list[Example]:
    """Examples from a JSONL file of ``{"text", "label"}`` (or ``{"prompt", "category"}``)."""
    p = Path(path)
    return parse_lines(p.read_text("utf-8").splitlines(), str(p))
