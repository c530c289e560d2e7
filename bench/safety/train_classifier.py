"""Train the shipped safety classifier offline and write ``safety/data/classifier_head.npz``.

    PYTHONPATH=src python bench/safety/train_classifier.py            # validate, then train
    PYTHONPATH=src python bench/safety/train_classifier.py --check    # only print the hash

1. Validation: train on the hand-written examples plus the corpus's training part, score the
   corpus's validation part (frames AND cores never seen in training, see
   `fleetgate.safety.classifier.corpus`), and pick a threshold per language for the default
   input policy (the shipped word lists, then the classifier): the lowest (0.05 to 0.95 in
   steps of 0.01) at which the policy blocks at most 8% of that language's benign validation
   prompts, issue #19's false-positive aim. (Until 2026-12-02 the rule was Youden's J, the
   best block rate minus false-positive rate; it is printed for comparison.)
2. Final: train on everything (`shipped_examples`) and save the model with those thresholds,
   the training data's hash and the validation figures.

bench/safety/data/heldout_test.jsonl is never read here: it is the test set, see docs/safety.md.
Embeddings are cached in ``--cache`` (keyed by text) so reruns take seconds, not minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fleetgate.resources import MiniLMEmbedder
from fleetgate.safety.checks.words import WordListCheck, default_word_lists
from fleetgate.safety.classifier import (
    BENIGN,
    Example,
    SoftmaxModel,
    corpus_examples,
    data_sha256,
    legacy_examples,
    shipped_examples,
    train,
)
from fleetgate.safety.classifier.train import featurize
from fleetgate.safety.normalize import Normalizer, is_cjk

HEAD = Path(__file__).resolve().parents[2] / "src/fleetgate/safety/data/classifier_head.npz"
FP_AIM = 0.08  # issue #19: at most 8% of safe prompts blocked


class CachedEmbedder:
    """The int8 MiniLM embedder with a per-text cache on disk (same vectors, computed once)."""

    def __init__(self, inner: MiniLMEmbedder, path: Path) -> None:
        self.inner, self.path = inner, path
        self.name, self.dim = inner.name, inner.dim
        self.vectors: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path, allow_pickle=False) as data:
                self.vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        missing = sorted({t for t in texts if self.key(t) not in self.vectors})
        if missing:
            for i in range(0, len(missing), 512):
                chunk = missing[i : i + 512]
                for text, vec in zip(chunk, self.inner.encode(chunk), strict=True):
                    self.vectors[self.key(text)] = vec
                print(f"  embedded {min(i + 512, len(missing))}/{len(missing)}", file=sys.stderr)
            self.save()
        return np.stack([self.vectors[self.key(t)] for t in texts]).astype(np.float32)

    def save(self) -> None:
        keys = list(self.vectors)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("wb") as fh:
            np.savez(fh, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))


def harm_scores(model: SoftmaxModel, x: np.ndarray) -> np.ndarray:
    return 1.0 - model.predict_proba(x)[:, model.classes.index(BENIGN)]


def split(examples: Sequence[Example], lang: str) -> tuple[list[int], list[int]]:
    sel = [i for i, ex in enumerate(examples) if is_cjk(ex.text) == (lang == "zh")]
    return ([i for i in sel if examples[i].label != BENIGN],
            [i for i in sel if examples[i].label == BENIGN])  # fmt: skip


def rates(blocked: np.ndarray, examples: Sequence[Example], lang: str) -> str:
    harm, safe = split(examples, lang)
    hits, fps = int(blocked[harm].sum()), int(blocked[safe].sum())
    return (f"blocked {hits}/{len(harm)} = {hits / len(harm):.1%}, "
            f"false positives {fps}/{len(safe)} = {fps / len(safe):.1%}")  # fmt: skip


GRID = [round(float(t), 2) for t in np.arange(0.05, 0.951, 0.01)]


def pick_threshold(
    scores: np.ndarray, words: np.ndarray, examples: Sequence[Example], lang: str
) -> float:
    """The lowest threshold at which words-or-classifier blocks at most `FP_AIM` of the safe
    validation prompts of ``lang`` (0.95 when none does)."""
    _, safe = split(examples, lang)
    return next((t for t in GRID if ((scores >= t) | words)[safe].mean() <= FP_AIM), GRID[-1])


def youden_threshold(scores: np.ndarray, examples: Sequence[Example], lang: str) -> float:
    """The previous rule: the highest block rate minus false-positive rate (ties: higher)."""
    harm, safe = split(examples, lang)
    best, best_j = 0.5, -1.0
    for t in GRID:
        j = (scores[harm] >= t).mean() - (scores[safe] >= t).mean()
        if j >= best_j:
            best, best_j = t, float(j)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HEAD)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/fg-emb-max.npz"))
    ap.add_argument("--l2", type=float, default=1e-4)
    ap.add_argument("--epochs", type=int, default=400)
    ap.add_argument("--check", action="store_true", help="print the training data hash only")
    args = ap.parse_args()
    examples = shipped_examples()
    print(f"training data: {len(examples)} examples, sha256 {data_sha256(examples)}")
    if args.check:
        return 0
    embedder = CachedEmbedder(MiniLMEmbedder(quantize=True, with_max=True), args.cache)
    normalizer = Normalizer()
    train_part = legacy_examples() + corpus_examples("train")
    val_part = corpus_examples("validation")
    print(f"validation: train on {len(train_part)}, score {len(val_part)} "
          "(frames and cores not in the training part)")  # fmt: skip
    t0 = time.perf_counter()
    tmp = args.out.with_name("validation-model.npz.tmp")
    train(train_part, tmp, embedder=embedder, l2=args.l2, epochs=args.epochs)
    model = SoftmaxModel.load(tmp)[0]
    tmp.unlink()
    scores = harm_scores(model, featurize([e.text for e in val_part], embedder, normalizer))
    lists = WordListCheck(default_word_lists())
    words = np.array([bool(lists.scan(e.text)[0]) for e in val_part])
    info = {}
    for lang in ("en", "zh"):
        threshold = pick_threshold(scores, words, val_part, lang)
        policy = rates((scores >= threshold) | words, val_part, lang)
        info[f"threshold_{lang}"] = str(threshold)
        info[f"validation_{lang}"] = f"words + classifier at {threshold}: {policy}"
        print(f"  {lang}: words alone: {rates(words, val_part, lang)}")
        for t in sorted({0.5, threshold, youden_threshold(scores, val_part, lang)}):
            print(f"  {lang} classifier at {t}: {rates(scores >= t, val_part, lang)}; "
                  f"with words: {rates((scores >= t) | words, val_part, lang)}")  # fmt: skip
    train(examples, args.out, embedder=embedder, info=info, l2=args.l2, epochs=args.epochs)
    size = args.out.stat().st_size
    print(f"wrote {args.out} ({size / 1024:.0f} KiB) in {time.perf_counter() - t0:.0f} s")
    print(json.dumps(SoftmaxModel.load(args.out)[0].info, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
