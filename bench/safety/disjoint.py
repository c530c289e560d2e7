"""How far the classifier's training data is from a held-out set (counts only).

    PYTHONPATH=src python bench/safety/disjoint.py [--set FILE]   # default: the blind test set

For every held-out prompt: is it a training text (exactly, after normalisation)? Does it share
a run of 6 words (English) or 10 characters (Chinese) with any training text? The frames and
indirect frames of the corpus (`fleetgate_training.classifier.corpus`) are also checked one by
one: the fixed words of a frame (the text around ``{x}``) should not occur in any held-out
prompt. Only counts are printed so that running this does not show the held-out prompts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from fleetgate.safety.normalize import Normalizer, is_cjk
from fleetgate_training.classifier import shipped_examples
from fleetgate_training.classifier.corpus import LANGS, _load

HELDOUT = Path(__file__).resolve().parent / "data" / "heldout_blind.jsonl"
_WORD = re.compile(r"[a-z0-9']+")
_CJK_RUN = re.compile(r"[\u3400-\u9fff]+")


def grams(text: str) -> set[str]:
    if is_cjk(text):
        runs = "".join(_CJK_RUN.findall(text))
        return {runs[i : i + 10] for i in range(len(runs) - 9)}
    words = _WORD.findall(text)
    return {" ".join(words[i : i + 6]) for i in range(len(words) - 5)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", type=Path, default=HELDOUT)
    args = ap.parse_args()
    norm = Normalizer(leet=False)
    heldout = [norm.normalize(json.loads(line)["prompt"])
               for line in args.set.read_text("utf-8").splitlines() if line.strip()]  # fmt: skip
    train = [norm.normalize(ex.text) for ex in shipped_examples()]
    train_set = set(train)
    train_grams: set[str] = set().union(*(grams(t) for t in train))
    exact = sum(1 for h in heldout if h in train_set)
    shared = sum(1 for h in heldout if grams(h) & train_grams)
    print(f"held-out prompts: {len(heldout)}; training texts: {len(train)}")
    print(f"held-out prompts that are training texts: {exact}")
    print(f"held-out prompts sharing a 6-word / 10-character run with a training text: {shared}")
    frames_in = 0
    n_frames = 0
    for lang in LANGS:
        data = _load(lang)
        lists = ("frames", "indirect_frames", "embedded_frames")
        for frame in (f for name in lists for f in data.get(name, [])):
            n_frames += 1
            parts = [norm.normalize(p) for p in frame.split("{x}") if len(p.strip()) >= 8]
            if parts and any(all(p in h for p in parts) for h in heldout):
                frames_in += 1
    print(f"corpus frames whose fixed words (8+ characters) occur in a held-out prompt: "
          f"{frames_in}/{n_frames}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
