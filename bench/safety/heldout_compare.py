"""The default input policy against the previous default on a labelled set (McNemar).

    PYTHONPATH=src python bench/safety/heldout_compare.py [--set FILE] [--previous REV]
        [--category-column kind]

``fleetgate safety eval --set FILE --policy A --compare B`` compares two policies of one config;
the previous default's classifier head and word lists are files of an earlier commit, which a
config cannot name, so this script takes them from git (``git show REV:...``, default ``REV``:
the commit before the current head and lists were shipped) and runs the CLI's own pieces:
`load_labeled`, `evaluate`, `compare`. Both policies are `words` + `pii` (mask) + `classifier`
on the same int8 MiniLM, under today's code: how a text is split into pieces
(`chunks.split_chunks`) is code, so the previous head is run as today's code splits texts
(since the ninth version, short texts whole), not always as it shipped. Same output as the
CLI: each policy's report (Wilson intervals, per category and language), then the paired
comparison with its exact McNemar p-value, overall and per language.

The default set is the latest blind test set (bench/safety/data/heldout_blind4.jsonl, run
once for the twelfth version and the tenth; a next version needs a fifth, written before its
run): run a blind set to report figures, once per version, never to choose anything, and only
after the paired comparisons on the dev sets (``--set``; the four joined, with ``--head`` a
candidate's head file and ``--previous`` another's) have been read
(docs/results/safety-evaluations.md). The dev sets (bench/safety/data/heldout_dev.jsonl,
the held-out set of the first to eighth versions,
and heldout_blind.jsonl, heldout_blind2.jsonl and heldout_blind3.jsonl, the earlier blind sets)
are for looking at errors and choosing thresholds. ``--previous 97f5be8`` is the eleventh,
tried and not kept.
``--category-column kind`` breaks a blind set down by the framing of its attacks and the kind
of its look-alikes instead of the harm category.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from fleetgate.resources import MiniLM, MiniLMEmbedder
from fleetgate.safety import Guardrails, SafetyConfig
from fleetgate.safety.checks.classifier import ClassifierCheck
from fleetgate.safety.checks.words import WordListCheck, default_word_lists
from fleetgate_training.safety.compare import compare, compare_by_lang
from fleetgate_training.safety.evaluate import (
    blocked_by,
    evaluate,
    load_labeled,
)

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = ROOT / "bench" / "safety" / "data" / "heldout_blind4.jsonl"
DATA = "src/fleetgate/safety/data"
# The previous shipped classifier (docs/results/safety-evaluations.md lists every
# version's commit: 5078de1 the seventh, 813eec6 the sixth, 70bde59 the fifth, cc8b01c the
# first, 4f70545 the eighth; the
# ninth is d1221f6; 97f5be8 the eleventh, tried and not kept; the twelfth, shipped, 97dcf15).
PREVIOUS = "5851b8d"  # the tenth classifier of 2026-12-03


def from_git(rev: str, path: str, out: Path) -> Path:
    out.write_bytes(subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                                   check=True, capture_output=True).stdout)  # fmt: skip
    return out


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", type=Path, default=HELDOUT)
    ap.add_argument("--previous", default=PREVIOUS,
                    help="git revision of the previous default, or a head file (its word lists "
                    "then today's)")  # fmt: skip
    ap.add_argument(
        "--head",
        type=Path,
        default=None,
        help="a head file to run as the default's (a candidate not shipped yet)",
    )
    ap.add_argument("--category-column", default="category")
    args = ap.parse_args()
    attacks, benign = load_labeled(args.set, category=args.category_column)
    tmp = Path(tempfile.mkdtemp())
    if Path(args.previous).is_file():
        head, old_lists = Path(args.previous), default_word_lists()
    else:
        head = from_git(args.previous, f"{DATA}/classifier_head.npz", tmp / "head.npz")
        listed = from_git(args.previous, f"{DATA}/wordlists.json", tmp / "words.json")
        old_lists = {k: v for k, v in json.loads(listed.read_text()).items() if k[0] != "_"}
    embedder = MiniLMEmbedder(MiniLM(), quantize=True, with_max=True)
    checks = {
        "default": {"words": WordListCheck(default_word_lists()),
                    "classifier": ClassifierCheck(embedder=embedder, model_path=args.head)},
        "previous": {"words": WordListCheck(old_lists),
                     "classifier": ClassifierCheck(embedder=embedder, model_path=head)},
    }  # fmt: skip
    reports = {}
    for name, named in checks.items():
        guardrails = Guardrails(SafetyConfig(), checks=named)
        await guardrails.warm_up()
        reports[name] = await evaluate(attacks, benign, blocked_by(guardrails.policy("default")))
        await guardrails.aclose()
        print(f"== {name}\n{reports[name].format()}\n")
    names = ("default", "previous")
    print(compare(reports["default"], reports["previous"], names).format())
    by_lang = compare_by_lang(reports["default"], reports["previous"], attacks, benign, names)
    for lang, c in by_lang.items():
        print(f"{lang}: {c.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
