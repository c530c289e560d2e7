"""Block rates by hazard category on the hazard set's held-out authors (issue #38).

Runs a policy of the config's safety section in this process (default: the built-in
``default`` policy: word lists, PII mask, the shipped classifier) over the hazard set
(`fleetgate_training.classifier.hazards`) and prints, per category and language, the share of
harmful prompts blocked and the share of look-alike safe prompts refused, each with its 95%
Wilson interval; the categories that are only flagged (not blocked by default) are listed apart.

    python -m fleetgate_training.safety.hazards                  # held-out authors, default
    python -m fleetgate_training.safety.hazards --part train --policy strict --config gw.yaml
    python -m fleetgate_training.safety.hazards --json

Exit code 0, 2 for a bad argument or config.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetgate.errors import ConfigError
from fleetgate_training.classifier.hazards import HAZARDS, HazardPrompt, Part, hazard_prompts
from fleetgate_training.safety.evaluate import IsBlocked, blocked_by, wilson

__all__ = ["Count", "HazardReport", "evaluate_hazards", "main"]

LANGS = ("en", "zh")


@dataclass(slots=True)
class Count:
    """``hits`` of ``total`` (blocked harmful prompts, or refused look-alikes)."""

    hits: int = 0
    total: int = 0

    def add(self, hit: bool) -> None:
        self.hits += int(hit)
        self.total += 1

    def cell(self) -> str:
        if self.total == 0:
            return "-"
        lo, hi = wilson(self.hits, self.total)
        return f"{self.hits}/{self.total} {self.hits / self.total:.0%} [{lo:.0%}, {hi:.0%}]"

    def to_dict(self) -> dict[str, Any]:
        lo, hi = wilson(self.hits, self.total)
        rate = self.hits / self.total if self.total else None
        return {"hits": self.hits, "total": self.total, "rate": rate, "wilson95": [lo, hi]}


@dataclass(slots=True)
class HazardReport:
    """Counts keyed by (category code, language); ``harmful``: blocked of harmful prompts,
    ``lookalike``: refused of look-alike safe prompts; ``missed``/``refused``: the prompts."""

    harmful: dict[tuple[str, str], Count] = field(default_factory=dict)
    lookalike: dict[tuple[str, str], Count] = field(default_factory=dict)
    missed: list[HazardPrompt] = field(default_factory=list)
    refused: list[HazardPrompt] = field(default_factory=list)

    def add(self, prompt: HazardPrompt, blocked: bool) -> None:
        table = self.harmful if prompt.harmful else self.lookalike
        table.setdefault((prompt.hazard.code, prompt.lang), Count()).add(blocked)
        if prompt.harmful and prompt.hazard.blocks and not blocked:
            self.missed.append(prompt)
        if not prompt.harmful and blocked:
            self.refused.append(prompt)

    def total(self, table: dict[tuple[str, str], Count], lang: str, blocks: bool | None) -> Count:
        """``table``'s counts in ``lang`` summed over the blocked categories (``blocks`` True),
        the flagged ones (False) or all (None)."""
        out = Count()
        for hz in HAZARDS:
            if blocks is None or hz.blocks == blocks:
                c = table.get((hz.code, lang), Count())
                out.hits, out.total = out.hits + c.hits, out.total + c.total
        return out

    def format(self) -> str:
        head = f"{'category':<62}" + "".join(f"{'blocked ' + lang:<26}" for lang in LANGS)
        lines = [head]
        for blocks, title in ((True, "blocked by default"), (False, "flagged only")):
            lines.append(f"-- {title}")
            for hz in (h for h in HAZARDS if h.blocks == blocks):
                cells = "".join(f"{self.harmful.get((hz.code, lg), Count()).cell():<26}"
                                for lg in LANGS)  # fmt: skip
                lines.append(f"{hz.code + ' ' + hz.name:<62}{cells}")
            cells = "".join(f"{self.total(self.harmful, lg, blocks).cell():<26}" for lg in LANGS)
            lines.append(f"{'all ' + title:<62}{cells}")
        cells = "".join(f"{self.total(self.lookalike, lg, None).cell():<26}" for lg in LANGS)
        lines.append(f"{'look-alike safe prompts refused (all categories)':<62}{cells}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def keyed(table: dict[tuple[str, str], Count]) -> dict[str, Any]:
            return {f"{code}/{lang}": c.to_dict() for (code, lang), c in sorted(table.items())}

        return {
            "blocked": keyed(self.harmful),
            "lookalike_refused": keyed(self.lookalike),
            "missed": [p.text for p in self.missed],
            "refused": [p.text for p in self.refused],
        }


async def evaluate_hazards(
    prompts: Sequence[HazardPrompt], is_blocked: IsBlocked, concurrency: int = 4
) -> HazardReport:
    """Ask ``is_blocked`` about every prompt (``concurrency`` at a time) and count."""
    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: HazardPrompt) -> bool:
        async with gate:
            return await is_blocked(prompt.text)

    verdicts = await asyncio.gather(*(one(p) for p in prompts))
    report = HazardReport()
    for prompt, blocked in zip(prompts, verdicts, strict=True):
        report.add(prompt, blocked)
    return report


async def _run(part: Part, policy: str, config_path: str | None) -> HazardReport:
    from fleetgate.config.loader import load_config
    from fleetgate.resources.outbound import OutboundHttp
    from fleetgate.safety.config import SAFETY_SECTION, SafetyConfig
    from fleetgate.safety.policy import Guardrails
    from fleetgate.safety.registry import builtin_registry

    loaded = load_config(config_path) if config_path else None
    config = (SAFETY_SECTION.of(loaded) if loaded else None) or SafetyConfig()
    if policy not in config.policies:
        raise ConfigError(f"no policy {policy} (known: {', '.join(sorted(config.policies))})")
    http = OutboundHttp()
    guardrails = Guardrails(config, registry=builtin_registry(http=http))
    try:
        await guardrails.warm_up()
        return await evaluate_hazards(hazard_prompts(part), blocked_by(guardrails.policy(policy)))
    finally:
        await guardrails.aclose()
        await http.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--part",
        choices=("test", "train", "all"),
        default="test",
        help="which authors: the held-out ones (default), the training ones, all",
    )
    ap.add_argument("--policy", default="default", help="a policy of the config's safety section")
    ap.add_argument("--config", help="gateway config file (default: the built-in policies)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    try:
        report = asyncio.run(_run(args.part, args.policy, args.config))
    except ConfigError as exc:
        print(f"hazards: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(f"hazard set, {args.part} authors, policy {args.policy}")
        print(report.format())
    return 0


if __name__ == "__main__":
    sys.exit(main())
