"""The default input policy against the previous default on a labelled set (McNemar).

    PYTHONPATH=src python bench/safety/heldout_compare.py [--set FILE]   # default: the held-out set

``fleetgate safety eval --set FILE --policy A --compare B`` compares two policies of one config;
the previous default cannot be written as config any more (its classifier trained at start on
the hand-written examples over fp32 sentence-transformers embeddings), so this script builds it
in code and runs the CLI's own pieces: `load_labeled`, `evaluate`, `compare`. Same output as
the CLI: each policy's report (Wilson intervals, per category and language), then the paired
comparison with its exact McNemar p-value.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from fleetgate.resources import MiniLM, MiniLMEmbedder
from fleetgate.safety import Guardrails, SafetyConfig
from fleetgate.safety.checks.classifier import ClassifierCheck
from fleetgate.safety.classifier import legacy_examples
from fleetgate.safety.evaluate import blocked_by, compare, evaluate, load_labeled

HELDOUT = Path(__file__).resolve().parent / "data" / "heldout_test.jsonl"


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", type=Path, default=HELDOUT)
    args = ap.parse_args()
    attacks, benign = load_labeled(args.set)
    minilm = MiniLM()
    tmp = Path(tempfile.mkdtemp())
    checks = {
        "default": ClassifierCheck(embedder=MiniLMEmbedder(minilm, quantize=True, with_max=True)),
        "previous": ClassifierCheck(
            embedder=MiniLMEmbedder(minilm), examples=legacy_examples(), cache_path=tmp / "p.npz"
        ),
    }
    reports = {}
    for name, check in checks.items():
        guardrails = Guardrails(SafetyConfig(), checks={"classifier": check})
        await guardrails.warm_up()
        reports[name] = await evaluate(attacks, benign, blocked_by(guardrails.policy("default")))
        await guardrails.aclose()
        print(f"== {name}\n{reports[name].format()}\n")
    print(compare(reports["default"], reports["previous"], ("default", "previous")).format())
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
