"""The classifier's second stage (issue #38): a logistic layer over the first stage's input
columns and its harm logit, trained on plain requests and look-alikes by many authors.

The first stage (the shipped softmax + hidden layer) learned how an attack is *framed* from a
corpus of framings; the second reads the same features plus the first stage's verdict and is
trained on what is *asked*: the hazard set's training authors
(`fleetgate_training.classifier.hazards`, never its held-out ones) and labelled prompt sets
written apart from the training corpus (the project's dev and spent blind sets,
``bench/safety/data/heldout_{dev,blind,blind2,blind3}.jsonl``). Its probability replaces the
first stage's (`fleetgate.safety.classifier.model.SecondStage`), so the runtime cost is one
more dot product over columns it has already computed.

Thresholds, per language: the lowest at which the out-of-fold scores (five folds split by
author, so no author is on both sides) block at most ``cap`` of the safe prompts, pooled and on
the hazard set's look-alikes alike; word-list hits count as blocked, as at run time.

    python -m fleetgate_training.classifier.second_stage \\
        --sets bench/safety/data/heldout_{dev,blind,blind2,blind3}.jsonl \\
        --cache /tmp/emb.npz --out src/fleetgate/safety/data/classifier_head.npz

No published safety benchmark's prompts are read: the sets are the project's own.

It reads the shipped model's first stage and writes the first stage with the new second stage:
retraining the first stage (``bench/safety/train_classifier.py``) writes a model without one,
so run this after it (the thresholds it picks replace ``threshold_en``/``threshold_zh``; the
first stage's are kept as ``first_threshold_*``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleetgate.resources import MiniLMEmbedder
from fleetgate.safety.checks.words import WordListCheck, default_word_lists
from fleetgate.safety.classifier.chunks import scored_pieces
from fleetgate.safety.classifier.embed import Floats, text_features_sparse
from fleetgate.safety.classifier.features import NGRAM_WEIGHT, shipped_head_path
from fleetgate.safety.classifier.gloss import Glosser
from fleetgate.safety.classifier.model import SecondStage, SoftmaxModel
from fleetgate.safety.normalize import Normalizer, is_cjk
from fleetgate_training.classifier.fit_softmax import fit_softmax
from fleetgate_training.classifier.hazards import Part, hazard_prompts

__all__ = [
    "FIRST_SCALE",
    "Labelled",
    "choose_thresholds",
    "fit_second_stage",
    "labelled_prompts",
    "main",
    "prompts_sha256",
]

FIRST_SCALE = 0.3  # the first stage's logit enters at this scale (its weight is learned)
FOLDS = 5


@dataclass(frozen=True, slots=True)
class Labelled:
    """One training prompt: ``group`` is its author (folds never split an author)."""

    text: str
    harmful: bool
    lang: str
    group: str
    lookalike: bool  # a hazard-set look-alike (thresholds keep these under the cap too)


def labelled_prompts(sets: Sequence[Path], hazard_part: Part = "train") -> list[Labelled]:
    """The hazard set's authors of ``hazard_part`` (harmful prompts of the blocked categories
    and every look-alike; the thirteenth version: ``"train"``, the fourteenth: ``"all"``) and the
    rows of ``sets`` (JSONL: ``prompt``, ``label`` safe/unsafe, ``lang``, ``author``)."""
    out = [
        Labelled(p.text, p.harmful, p.lang, p.author, not p.harmful)
        for p in hazard_prompts(hazard_part)
        if not p.harmful or p.hazard.blocks
    ]
    for path in sets:
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            label = str(row["label"]).lower()
            if label not in ("safe", "unsafe"):
                raise ValueError(f"{path}:{n}: label {label!r} is neither safe nor unsafe")
            text = str(row["prompt"])
            lang = str(row.get("lang") or ("zh" if is_cjk(text) else "en"))
            group = f"{path.stem}:{row.get('author', '')}"
            out.append(Labelled(text, label == "unsafe", lang, group, False))
    return out


def prompts_sha256(prompts: Sequence[Labelled]) -> str:
    """Identifies the second stage's training data (texts and labels, order included); the
    shipped model records it as ``second_data_sha256``."""
    sha = hashlib.sha256()
    for p in prompts:
        sha.update(json.dumps([p.text, p.harmful], ensure_ascii=False).encode())
    return sha.hexdigest()


class _Cache:
    """Embeddings by text hash, on disk between runs (the same int8 vectors, computed once)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.vectors: dict[str, Floats] = {}
        if path is not None and path.exists():
            with np.load(path, allow_pickle=False) as data:
                self.vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))

    def embed(self, texts: Sequence[str], embedder: MiniLMEmbedder, glosser: Glosser) -> Floats:
        def key(t: str) -> str:
            return hashlib.sha1(t.encode()).hexdigest()

        missing = sorted({t for t in texts if key(t) not in self.vectors})
        for i in range(0, len(missing), 32):
            chunk = missing[i : i + 32]
            rows = embedder.encode([glosser.gloss(t) for t in chunk])
            self.vectors.update(
                (key(t), np.asarray(v, np.float32)) for t, v in zip(chunk, rows, strict=True)
            )
        if missing and self.path is not None:
            keys = list(self.vectors)
            vectors = np.stack([self.vectors[k] for k in keys])
            np.savez(self.path, keys=np.array(keys), vectors=vectors)
        return np.stack([self.vectors[key(t)] for t in texts]).astype(np.float32)


@dataclass(slots=True)
class _Design:
    """Every piece of every prompt: its feature blocks, its prompt, the first stage's harm."""

    emb: Floats
    grams: Any
    owner: Any
    first: Floats

    def rows(self, index: Any) -> list[Any]:
        logit = np.log(self.first[index] / (1.0 - self.first[index]))[:, None]
        return [self.emb[index], self.grams[index], (FIRST_SCALE * logit).astype(np.float32)]


def _design(
    texts: Sequence[str], model: SoftmaxModel, cache: _Cache, embedder: MiniLMEmbedder
) -> _Design:
    from scipy.sparse import csr_matrix

    glosser = Glosser()
    pieces: list[str] = []
    owner: list[int] = []
    for i, text in enumerate(texts):
        mine = scored_pieces(text)
        pieces.extend(mine)
        owner.extend([i] * len(mine))
    emb = cache.embed(pieces, embedder, glosser)
    grams = csr_matrix(text_features_sparse(pieces, Normalizer()) * np.float32(NGRAM_WEIGHT))
    proba = model.first_stage_proba([emb, grams])
    first = np.clip(1.0 - proba[:, model.classes.index("benign")], 1e-6, 1 - 1e-6)
    return _Design(emb, grams, np.array(owner), first.astype(np.float32))


def _training_rows(design: _Design, prompts: Sequence[Labelled], keep: Any) -> Any:
    """Pieces to train on, for the prompts in ``keep``: every piece of a safe prompt, the
    first stage's worst piece of a harmful one (its other sentences may be harmless)."""
    rows: list[int] = []
    for i in np.flatnonzero(keep).tolist():
        mine = np.flatnonzero(design.owner == i)
        rows.extend(mine if not prompts[i].harmful else [mine[np.argmax(design.first[mine])]])
    return np.array(rows)


def fit_second_stage(
    design: _Design, prompts: Sequence[Labelled], keep: Any, l2: float = 1.5e-4
) -> SecondStage:
    """The logistic layer, fitted (balanced classes) on the prompts in ``keep``."""
    rows = _training_rows(design, prompts, keep)
    labels = ["harm" if prompts[design.owner[r]].harmful else "benign" for r in rows]
    fitted = fit_softmax(design.rows(rows), labels, l2=l2, epochs=400, lr=0.05)
    h, b = fitted.classes.index("harm"), fitted.classes.index("benign")
    w = (fitted.weights[:, h] - fitted.weights[:, b]).astype(np.float32)
    bias = float(fitted.bias[h] - fitted.bias[b])
    return SecondStage(w[:-1], bias, FIRST_SCALE * float(w[-1]))


def _scores(design: _Design, second: SecondStage, index: Any) -> Floats:
    """The second stage's harm per prompt in ``index`` (its worst piece)."""
    out = np.zeros(len(index), np.float32)
    where = {int(p): k for k, p in enumerate(index)}
    pieces = np.flatnonzero(np.isin(design.owner, index))
    harm = second.harm(design.rows(pieces)[:2], design.first[pieces])
    for piece, h in zip(pieces, harm, strict=True):
        k = where[int(design.owner[piece])]
        out[k] = max(out[k], h)
    return out


def _folds(prompts: Sequence[Labelled]) -> Any:
    """A fold per prompt, whole authors per fold (largest first, to the emptiest fold)."""
    sizes: dict[str, int] = {}
    for p in prompts:
        sizes[p.group] = sizes.get(p.group, 0) + 1
    load, of = [0] * FOLDS, {}
    for group in sorted(sizes, key=lambda g: (-sizes[g], g)):
        f = int(np.argmin(load))
        of[group], load[f] = f, load[f] + sizes[group]
    return np.array([of[p.group] for p in prompts])


def choose_thresholds(
    scores: Floats, words: Any, prompts: Sequence[Labelled], cap: float
) -> dict[str, float]:
    """Per language, the lowest threshold at which at most ``cap`` of the safe prompts are
    blocked (word-list hits included), pooled and among the hazard set's look-alikes."""
    out: dict[str, float] = {}
    for lang in ("en", "zh"):
        idx = np.array([i for i, p in enumerate(prompts) if p.lang == lang])
        safe = np.array([not prompts[i].harmful for i in idx])
        look = np.array([prompts[i].lookalike for i in idx])
        for t in np.round(np.arange(0.05, 1.0, 0.005), 3):
            blocked = words[idx] | (scores[idx] >= t)
            if blocked[safe].mean() <= cap and blocked[look].mean() <= cap:
                out[lang] = float(t)
                break
        else:
            out[lang] = 1.0
    return out


def word_list_hits(prompts: Sequence[Labelled]) -> Any:
    """Which prompts the shipped word lists already block (the thresholds are chosen for the
    rest)."""
    words = WordListCheck(default_word_lists())
    try:
        return np.array([bool(words.scan(p.text)[0]) for p in prompts])
    finally:
        words.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", type=Path, nargs="*", default=[], help="labelled JSONL sets")
    ap.add_argument("--cache", type=Path, help="embedding cache (.npz), reused between runs")
    ap.add_argument("--out", type=Path, required=True, help="where to write the model")
    ap.add_argument("--cap", type=float, default=0.05, help="safe prompts blocked, at most")
    ap.add_argument(
        "--hazard-part",
        choices=("train", "all"),
        default="train",
        help="the hazard set's authors to train on: the training ones (the thirteenth "
        "version) or all, the four formerly held out included (the fourteenth)",
    )
    args = ap.parse_args(argv)
    first, fingerprint = SoftmaxModel.load(shipped_head_path())
    first.second = None
    prompts = labelled_prompts(args.sets, args.hazard_part)
    embedder = MiniLMEmbedder(quantize=True, with_max=True)
    design = _design([p.text for p in prompts], first, _Cache(args.cache), embedder)
    hits = word_list_hits(prompts)
    folds = _folds(prompts)
    oof = np.zeros(len(prompts), np.float32)
    for f in range(FOLDS):
        second = fit_second_stage(design, prompts, folds != f)
        held = np.flatnonzero(folds == f)
        oof[held] = _scores(design, second, held)
        print(f"fold {f + 1}/{FOLDS}: {len(held)} prompts scored", file=sys.stderr)
    thresholds = choose_thresholds(oof, hits, prompts, args.cap)
    second = fit_second_stage(design, prompts, np.ones(len(prompts), bool))
    info = dict(first.info)
    info.update(
        {
            # the first stage's own thresholds (a model read with a second stage keeps them
            # as first_threshold_*: its threshold_* are its second stage's)
            "first_threshold_en": first.info.get("first_threshold_en")
            or first.info.get("threshold_en", ""),
            "first_threshold_zh": first.info.get("first_threshold_zh")
            or first.info.get("threshold_zh", ""),
            "threshold_en": f"{thresholds['en']:.3f}",
            "threshold_zh": f"{thresholds['zh']:.3f}",
            "second_stage": "logistic over the same columns + 0.3 x first-stage harm logit",
            "second_data_sha256": prompts_sha256(prompts),
            "second_data": f"hazard set authors ({args.hazard_part}) + "
            + ", ".join(p.name for p in args.sets),
            "second_cap": str(args.cap),
        }
    )
    model = SoftmaxModel(first.classes, first.weights, first.bias, info, first.hidden, second)
    model.save(args.out, fingerprint)
    print(json.dumps({"thresholds": thresholds, "prompts": len(prompts)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
