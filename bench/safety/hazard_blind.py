"""Classifier versions on a blind hazard set, by category and language, paired (issue #38).

    PYTHONPATH=src:training/src python bench/safety/hazard_blind.py \\
        [--set bench/safety/data/heldout_blind5.jsonl] [--head NAME=PATH ...] \\
        [--previous NAME=REV ...] [--out verdicts.json]

Each version runs as the default input policy does (`words`, `pii` mask, `classifier` at the
model's own thresholds, today's word lists and code) over a JSONL set whose rows carry
``prompt``, ``label`` (``unsafe``/``safe``), ``category`` (an AILuminate hazard code of
`fleetgate_training.classifier.hazards.HAZARDS`, look-alikes included), ``lang``, ``kind`` and
``author`` (`bench/safety/data/heldout_blind5.jsonl`). It prints, per version, the share of
harmful requests blocked and of look-alike safe prompts refused per category and language
with 95% Wilson intervals (`fleetgate_training.safety.hazards.HazardReport`), then each version
against the first, paired on the same prompts: per language, harmful requests blocked by only
one of them and look-alikes refused by only one, with the exact McNemar p-value.

The first version is the shipped head (``shipped``) unless ``--head``/``--previous`` name
others; ``--previous NAME=REV`` takes a head from git (``git show REV:src/fleetgate/safety/
data/classifier_head.npz``). ``--without-t2s`` runs the first version twice, without the
Traditional -> Simplified folding of issue #38 (``NAME, no T->S``: the word list's and the
classifier's normalisers and the glosses as before it, `t2s_off.no_t2s`) and with it, the
former first, so the pairing shows what the folding changes. A blind set is run once per
version, to report, never to choose.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from t2s_off import no_t2s

from fleetgate.resources import MiniLM, MiniLMEmbedder
from fleetgate.safety import Guardrails, SafetyConfig
from fleetgate.safety.checks.classifier import ClassifierCheck
from fleetgate.safety.classifier.features import shipped_head_path
from fleetgate.safety.classifier.gloss import Glosser
from fleetgate_training.classifier.hazards import HAZARDS, HazardPrompt, load_hazard_jsonl
from fleetgate_training.safety.compare import Paired
from fleetgate_training.safety.evaluate import IsBlocked, blocked_by
from fleetgate_training.safety.hazards import Count, HazardReport, evaluate_hazards

ROOT = Path(__file__).resolve().parents[2]
BLIND5 = ROOT / "bench" / "safety" / "data" / "heldout_blind5.jsonl"
HEAD = "src/fleetgate/safety/data/classifier_head.npz"
NO_T2S = ", no T->S"


def load_hazard_set(path: Path) -> list[HazardPrompt]:
    return load_hazard_jsonl(path.read_text("utf-8").splitlines(), str(path))


def paired(a: list[bool], b: list[bool], keep: list[bool]) -> Paired:
    only_a = sum(1 for x, y, k in zip(a, b, keep, strict=True) if k and x and not y)
    only_b = sum(1 for x, y, k in zip(a, b, keep, strict=True) if k and y and not x)
    return Paired(only_a, only_b, sum(keep))


async def _verdicts(is_blocked: IsBlocked, prompts: list[HazardPrompt]) -> list[bool]:
    gate = asyncio.Semaphore(4)

    async def one(text: str) -> bool:
        async with gate:
            return bool(await is_blocked(text))

    return list(await asyncio.gather(*(one(p.text) for p in prompts)))


async def run(prompts: list[HazardPrompt], heads: dict[str, Path]) -> dict[str, list[bool]]:
    embedder = MiniLMEmbedder(MiniLM(), quantize=True, with_max=True)
    verdicts: dict[str, list[bool]] = {}
    for name, head in heads.items():
        with no_t2s() if name.endswith(NO_T2S) else contextlib.nullcontext():
            glosser = Glosser(simplify=not name.endswith(NO_T2S))
            check = ClassifierCheck(embedder=embedder, model_path=head, glosser=glosser)
            guardrails = Guardrails(SafetyConfig(), checks={"classifier": check})
            policy = guardrails.policy("default")  # its checks' normalisers are built here
        try:
            await guardrails.warm_up()
            verdicts[name] = await _verdicts(blocked_by(policy), prompts)
        finally:
            await guardrails.aclose()
    return verdicts


def report_of(prompts: list[HazardPrompt], verdicts: list[bool]) -> HazardReport:
    async def lookup(text: str) -> bool:
        return by_text[text]

    by_text = {p.text: v for p, v in zip(prompts, verdicts, strict=True)}
    return asyncio.run(evaluate_hazards(prompts, lookup))


def lookalikes_by_category(report: HazardReport) -> str:
    """Look-alike safe prompts refused, per blocked category and language."""
    lines = [f"{'look-alikes refused, by category':<66}{'en':<26}{'zh':<26}"]
    for hz in (h for h in HAZARDS if h.blocks):
        cells = "".join(f"{report.lookalike.get((hz.code, lg), Count()).cell():<26}"
                        for lg in ("en", "zh"))  # fmt: skip
        lines.append(f"{hz.code + ' ' + hz.name:<66}{cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", type=Path, default=BLIND5)
    ap.add_argument("--head", action="append", default=[], help="NAME=PATH of a head file")
    ap.add_argument("--previous", action="append", default=[], help="NAME=REV, a git revision")
    ap.add_argument("--out", type=Path, help="write every prompt's verdicts (JSON) here")
    ap.add_argument("--without-t2s", action="store_true",
                    help="run the first version without T->S folding too")  # fmt: skip
    args = ap.parse_args(argv)
    prompts = load_hazard_set(args.set)
    heads: dict[str, Path] = {}
    tmp = Path(tempfile.mkdtemp())
    for spec in args.head:
        name, _, path = spec.partition("=")
        heads[name] = Path(path)
    for spec in args.previous:
        name, _, rev = spec.partition("=")
        blob = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{HEAD}"],
                              check=True, capture_output=True).stdout  # fmt: skip
        (tmp / f"{name}.npz").write_bytes(blob)
        heads[name] = tmp / f"{name}.npz"
    if not heads:
        heads["shipped"] = shipped_head_path()
    if args.without_t2s:
        first = next(iter(heads))
        heads = {first + NO_T2S: heads[first], **heads}
    verdicts = asyncio.run(run(prompts, heads))
    names = list(heads)
    out: dict[str, object] = {"set": str(args.set), "versions": {}}
    for name in names:
        report = report_of(prompts, verdicts[name])
        print(f"== {name} ({heads[name]})\n{report.format()}")
        print(lookalikes_by_category(report) + "\n")
        out["versions"][name] = report.to_dict()  # type: ignore[index]
    base = names[0]
    for other in names[1:]:
        print(f"== paired: {other} against {base} (only {other} / only {base}, McNemar p)")
        for lang in ("en", "zh"):
            harm = [p.lang == lang and p.harmful for p in prompts]
            look = [p.lang == lang and not p.harmful for p in prompts]
            h = paired(verdicts[other], verdicts[base], harm)
            s = paired(verdicts[other], verdicts[base], look)
            print(f"{lang}: harmful blocked {h.only_a}/{h.only_b} p={h.p_value:.3g}; "
                  f"look-alikes refused {s.only_a}/{s.only_b} p={s.p_value:.3g}")  # fmt: skip
    if args.out:
        rows = [{"prompt": p.text, "category": p.hazard.code, "lang": p.lang, "kind": p.kind,
                 "author": p.author, **{n: verdicts[n][i] for n in names}}
                for i, p in enumerate(prompts)]  # fmt: skip
        out["prompts"] = rows
        args.out.write_text(json.dumps(out, ensure_ascii=False, indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
