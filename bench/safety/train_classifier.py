"""Train the shipped safety classifier offline and write ``safety/data/classifier_head.npz``.

    PYTHONPATH=src python bench/safety/train_classifier.py            # validate, then train
    PYTHONPATH=src python bench/safety/train_classifier.py --check    # only print the hash

1. Out-of-fold scores: for each of the corpus's folds k (``--folds``: all five by default, as
   every shipped version), train on the hand-written examples
   plus the corpus texts whose frame and core are both outside fold k, and score the prompts
   whose frame and core are both in fold k (`corpus_examples(..., validation_fold=k,
   pieces=False)`: frames and cores never seen in training), each as its worst sentence piece,
   as `ClassifierCheck` scores it. Saved with ``--oof FILE`` (and reused from it while the
   training data is unchanged); `oof_rules.py` compares decision rules on that file.
2. A threshold per language on the harm probability 1 - p(benign) for the default input
   policy (the shipped word lists, then the classifier): the lowest (0.02 to 0.99 in steps of
   0.01) at which the policy blocks at most 8% of that language's benign out-of-fold prompts
   (issue #19's false-positive aim), the folds pooled. (Until 2026-12-02's third version
   it was chosen on fold 0 alone, which picked 0.50 for Chinese: 22.7% false positives on the
   other four folds. Per-category thresholds were tried and not kept: `oof_rules.py`.)
3. Final: train on everything (`shipped_examples`) and score the dev sets (``--dev``; prompts
   written apart from the corpus, by other authors): bench/safety/data/heldout_dev.jsonl (the
   held-out set of the first to eighth versions), heldout_blind.jsonl (the ninth's blind test
   set), heldout_blind2.jsonl and heldout_blind3.jsonl (the tenth's, each run once as a test
   before becoming a dev set). The dev sets set the thresholds (since the tenth version): a
   language's threshold is the lowest at which the dev sets *pooled* block at most
   ``--dev-cap`` of their benign prompts in that language (6%: two points under the 8% aim,
   over about 1,000 benign prompts per language, whose 95% interval is about +-1.5 points)
   and *each* set at most ``--set-cap`` (8%, the aim itself: a group of authors whose
   look-alikes are harder than the rest is held to the aim). (The tenth, with two dev sets,
   held each to 6%: with four sets that rule takes the worst of four noisy figures, a
   threshold that rises with every set added: the eleventh, tried on 2026-12-03 with a third
   dev set, blocked fewer dev attacks than the tenth.) Step 2's out-of-fold threshold is
   reported beside it, and used with ``--no-dev``. (The ninth took the out-of-fold threshold
   and raised it where a dev set was over 8%; by the tenth the corpus's look-alikes had become
   the harder ones: at the out-of-fold threshold the tenth blocked 7.9% of the out-of-fold
   Chinese look-alikes and 4.2% of the first blind set's.) Saved with the thresholds, the
   training data's hash and the out-of-fold and dev figures.

The latest blind set (heldout_blind4.jsonl, run once for the twelfth) is not read here, see
docs/results/safety-evaluations.md.
Embeddings are cached in ``--cache`` (keyed by text) so reruns skip the embedding. Each fold
draws its own frames for every core, so a cold cache embeds about 150,000 new texts per fold
and for the final model (about 25 minutes each in one of two processes on the 2-core VM; two
processes on different folds with two cache files, merged, halve the wait). With a warm cache
the six fits take about 13 minutes (torch on all cores).
``--folds 0 1`` scores two folds only, ``--folds`` with none the final fit alone, thresholds from
the dev sets (quicker looks while trying data; not for shipping).
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

from fleetgate.resources import MiniLM, MiniLMEmbedder
from fleetgate.safety.checks.words import WordListCheck, default_word_lists
from fleetgate.safety.classifier import BENIGN, SoftmaxModel
from fleetgate.safety.classifier.chunks import scored_pieces
from fleetgate.safety.classifier.features import FEATURE_VERSION
from fleetgate.safety.classifier.gloss import Glosser
from fleetgate.safety.normalize import Normalizer, is_cjk
from fleetgate_training.classifier import (
    corpus_examples,
    data_sha256,
    featurize_blocks,
    legacy_examples,
    shipped_examples,
    train,
)
from fleetgate_training.classifier.corpus import FOLDS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from thresholds import GRID, Bools, fmt, lowest_feasible  # noqa: E402

DEV_CAP = 0.06  # benign prompts blocked, at most, on the dev sets pooled (step 3)
SET_CAP = 0.08  # and on each dev set (issue #19's aim)

HEAD = Path(__file__).resolve().parents[2] / "src/fleetgate/safety/data/classifier_head.npz"
DEV = tuple(
    Path(__file__).resolve().parent / "data" / f"heldout_{name}.jsonl"
    for name in ("dev", "blind", "blind2", "blind3")
)


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


OOF_FIELDS = ("fold", "label", "lang", "words", "proba")


def features_key(hidden: int, folds: Sequence[int] = tuple(range(FOLDS))) -> str:
    """What out-of-fold scores depend on besides the data: the features, the head and the
    folds scored."""
    every = tuple(folds) == tuple(range(FOLDS))  # the key before --folds existed
    return f"{FEATURE_VERSION}/hidden{hidden}/worst-chunk" + ("" if every else f"/folds{folds}")


def worst_chunk_proba(
    model: SoftmaxModel,
    texts: Sequence[str],
    embedder: CachedEmbedder,
    normalizer: Normalizer,
    glosser: Glosser,
) -> np.ndarray:
    """Each text's class probabilities at its most harmful piece (`scored_pieces`): the score
    `ClassifierCheck` gives it. (Until the ninth version texts were scored whole here, while the
    check scored their sentences too: a threshold chosen on whole texts let through more false
    positives at run time than the out-of-fold figure said.)"""
    chunked = [scored_pieces(t) for t in texts]
    flat = [c for chunks in chunked for c in chunks]
    proba = model.predict_proba(featurize_blocks(flat, embedder, normalizer, glosser=glosser))
    benign = model.classes.index(BENIGN)
    out = np.empty((len(texts), proba.shape[1]), dtype=proba.dtype)
    at = 0
    for i, chunks in enumerate(chunked):
        part = proba[at : at + len(chunks)]
        out[i] = part[int(np.argmin(part[:, benign]))]
        at += len(chunks)
    return out


def oof_scores(
    embedder: CachedEmbedder,
    *,
    work: Path,
    l2: float,
    epochs: int | None,
    hidden: int,
    folds: Sequence[int] = tuple(range(FOLDS)),
) -> dict[str, np.ndarray]:
    """Train once per fold in ``folds`` and score its held-out texts: the arrays `OOF_FIELDS`,
    ``classes`` and ``data_sha256`` (``work``: a folder for the temporary model files)."""
    normalizer, glosser = Normalizer(), Glosser()
    lists = WordListCheck(default_word_lists())
    parts: dict[str, list[np.ndarray]] = {k: [] for k in OOF_FIELDS}
    classes: tuple[str, ...] = ()
    for k in folds:
        t0 = time.perf_counter()
        train_part = legacy_examples() + corpus_examples("train", validation_fold=k)
        val_part = corpus_examples("validation", validation_fold=k, pieces=False)
        tmp = work / f"oof-fold{k}-model.npz.tmp"
        train(train_part, tmp, embedder=embedder, glosser=glosser, l2=l2, epochs=epochs,
              hidden=hidden)  # fmt: skip
        model = SoftmaxModel.load(tmp)[0]
        tmp.unlink()
        if classes and model.classes != classes:
            raise SystemExit(f"fold {k} has classes {model.classes}, not {classes}")
        classes = model.classes
        texts = [e.text for e in val_part]
        parts["proba"].append(worst_chunk_proba(model, texts, embedder, normalizer, glosser))
        parts["fold"].append(np.full(len(val_part), k))
        parts["label"].append(np.array([e.label for e in val_part]))
        parts["lang"].append(np.array(["zh" if is_cjk(t) else "en" for t in texts]))
        parts["words"].append(np.array([bool(lists.scan(t)[0]) for t in texts]))
        print(f"  fold {k}: trained on {len(train_part)}, scored {len(val_part)} "
              f"in {time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
    return {
        "classes": np.array(classes),
        "data_sha256": np.array(data_sha256(shipped_examples())),
        "features": np.array(features_key(hidden, folds)),
        **{k: np.concatenate(v) for k, v in parts.items()},
    }


def load_or_score(path: Path | None, embedder: CachedEmbedder, args: argparse.Namespace
                  ) -> dict[str, np.ndarray]:  # fmt: skip
    """The out-of-fold scores saved at ``path`` if made from today's training data and features,
    else new."""
    if path is not None and path.exists():
        with np.load(path, allow_pickle=False) as data:
            saved = {k: data[k] for k in data.files}
        same_data = str(saved.get("data_sha256", "")) == data_sha256(shipped_examples())
        if same_data and str(saved.get("features", "")) == features_key(args.hidden, args.folds):
            print(f"out-of-fold scores from {path}")
            return saved
    work = (path or args.out).parent
    scores = oof_scores(embedder, work=work, l2=args.l2, epochs=args.epochs, hidden=args.hidden,
                        folds=args.folds)  # fmt: skip
    if path is not None:
        with path.open("wb") as fh:
            np.savez(fh, **scores)
    return scores


def rates(blocked: Bools, benign: Bools) -> str:
    hits, fps = int(blocked[~benign].sum()), int(blocked[benign].sum())
    return (
        f"blocked {fmt(hits, int((~benign).sum()))}, false positives {fmt(fps, int(benign.sum()))}"
    )


def choose(oof: dict[str, np.ndarray], lang: str) -> dict[str, str]:
    """``lang``'s threshold from the scored folds pooled, and its out-of-fold figures, as model
    info; printed with the threshold fold 0 alone would have given (the rule until
    2026-12-02's third version) and how that one does on the other folds scored."""
    b = [str(c) for c in oof["classes"]].index(BENIGN)
    sel = oof["lang"] == lang
    score, words = 1.0 - oof["proba"][sel][:, b].astype(np.float64), oof["words"][sel]
    benign, fold = oof["label"][sel] == BENIGN, oof["fold"][sel]
    threshold = lowest_feasible(score, words, benign, GRID)
    figures = rates(words | (score >= threshold), benign)
    scored = ", ".join(str(k) for k in sorted({int(k) for k in fold}))
    print(f"  {lang}: words alone: {rates(words, benign)}")
    print(f"  {lang}: words + classifier at {threshold} (folds {scored}): {figures}")
    zero, rest = fold == 0, fold != 0
    if zero.any() and rest.any():
        t0 = lowest_feasible(score[zero], words[zero], benign[zero], GRID)
        print(f"  {lang}: fold 0 alone would pick {t0}; on the other folds that gives "
              f"{rates((words | (score >= t0))[rest], benign[rest])}")  # fmt: skip
    return {
        f"threshold_{lang}": str(threshold),
        f"validation_{lang}": f"out-of-fold (folds {scored}), words + classifier at {threshold}: "
        + figures,
    }


def dev_scores(model: SoftmaxModel, path: Path, embedder: CachedEmbedder) -> dict[str, np.ndarray]:
    """The dev set's prompts as the default input policy sees them: label, language, word-list
    hit and harm probability at the worst piece."""
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    texts = [str(r["prompt"]) for r in rows]
    lists = WordListCheck(default_word_lists())
    proba = worst_chunk_proba(model, texts, embedder, Normalizer(), Glosser())
    return {
        "harm": 1.0 - proba[:, model.classes.index(BENIGN)].astype(np.float64),
        "benign": np.array([r["label"] == "safe" for r in rows]),
        "lang": np.array(["zh" if is_cjk(t) else "en" for t in texts]),
        "words": np.array([bool(lists.scan(t)[0]) for t in texts]),
    }


def _in_lang(dev: dict[str, np.ndarray], lang: str) -> tuple[np.ndarray, Bools, Bools]:
    """A `dev_scores` set's harm scores, word-list hits and benign flags in ``lang``."""
    sel = dev["lang"] == lang
    return dev["harm"][sel], dev["words"][sel], dev["benign"][sel]


def with_dev(
    info: dict[str, str],
    devs: Sequence[tuple[str, dict[str, np.ndarray]]],
    lang: str,
    cap: float = DEV_CAP,
    set_cap: float = SET_CAP,
) -> dict[str, str]:
    """``lang``'s threshold from the dev sets (name, `dev_scores`): the lowest at which the dev
    sets pooled block at most ``cap`` of their benign prompts in ``lang`` and each set at most
    ``set_cap``; with the dev figures there, and the out-of-fold threshold's for comparison."""
    oof_t = float(info.get(f"threshold_{lang}", "nan"))  # nan: no out-of-fold scores
    parts = [(name, *_in_lang(dev, lang)) for name, dev in devs]
    pooled = tuple(np.concatenate([p[i] for p in parts]) for i in (1, 2, 3))
    threshold = lowest_feasible(*pooled, GRID, aim=cap)
    print(f"  {lang}: dev sets pooled: at most {cap:.0%} false positives from {threshold}")
    for name, score, words, benign in parts:
        set_t = lowest_feasible(score, words, benign, GRID, aim=set_cap)
        threshold = max(threshold, set_t)
        at_oof = ""
        if not np.isnan(oof_t):
            at_oof = (
                f" at the out-of-fold threshold {oof_t}: {rates(words | (score >= oof_t), benign)};"
            )
        print(f"  {lang}: {name}{at_oof} at most {set_cap:.0%} false positives from {set_t}")
    lines = []
    for name, score, words, benign in [*parts, ("pooled", *pooled)]:
        lines.append(f"{name}: " + rates(words | (score >= threshold), benign))
        print(f"  {lang}: threshold {threshold}: {lines[-1]}")
    out = {
        f"threshold_{lang}": str(threshold),
        f"dev_{lang}": f"dev sets, words + classifier at {threshold}: " + "; ".join(lines),
    }
    return out if np.isnan(oof_t) else {**out, f"threshold_oof_{lang}": str(oof_t)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HEAD)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/fg-emb-max.npz"))
    ap.add_argument(
        "--oof",
        type=Path,
        default=Path("/tmp/fg-oof.npz"),
        help="out-of-fold scores: reused if made from the same data, else written",
    )
    ap.add_argument("--l2", type=float, default=1e-4)
    ap.add_argument("--epochs", type=int, default=None,
                    help="default: 16 with a hidden layer, 400 without")  # fmt: skip
    ap.add_argument("--hidden", type=int, default=256,
                    help="hidden units over the embedding (0: softmax alone)")  # fmt: skip
    ap.add_argument("--dev", type=Path, nargs="+", default=list(DEV),
                    help="dev sets, which set the thresholds (3.)")  # fmt: skip
    ap.add_argument("--dev-cap", type=float, default=DEV_CAP,
                    help="benign prompts blocked, at most, dev sets pooled (3.)")  # fmt: skip
    ap.add_argument("--set-cap", type=float, default=SET_CAP,
                    help="benign prompts blocked, at most, on each dev set (3.)")  # fmt: skip
    ap.add_argument("--no-dev", dest="dev", action="store_const", const=[])
    ap.add_argument("--folds", type=int, nargs="*", default=list(range(FOLDS)),
                    choices=range(FOLDS),
                    help="folds scored out of fold (1.); none: the final fit and the dev sets "
                    "alone (a quick look at data; not for shipping)")  # fmt: skip
    ap.add_argument("--check", action="store_true", help="print the training data hash only")
    args = ap.parse_args()
    examples = shipped_examples()
    print(f"training data: {len(examples)} examples, sha256 {data_sha256(examples)}")
    if args.check:
        return 0
    # all cores for the embedding and the fits (the gateway's MiniLM keeps to one thread)
    minilm = MiniLM(threads=None)
    embedder = CachedEmbedder(MiniLMEmbedder(minilm, quantize=True, with_max=True), args.cache)
    t0 = time.perf_counter()
    info: dict[str, str] = {}
    if args.folds:
        oof = load_or_score(args.oof, embedder, args)
        print(f"out-of-fold: {len(oof['label'])} prompts scored by models that never saw "
              "their frame or core")  # fmt: skip
        info = {**choose(oof, "en"), **choose(oof, "zh")}
    elif not args.dev:
        raise SystemExit("--folds with none needs the dev sets for its thresholds")
    train(examples, args.out, embedder=embedder, info=info, l2=args.l2, epochs=args.epochs,
          hidden=args.hidden)  # fmt: skip
    if args.dev:  # weights are stored as float16: loading and saving loses nothing
        model, fingerprint = SoftmaxModel.load(args.out)
        devs = [(path.stem, dev_scores(model, path, embedder)) for path in args.dev]
        for lang in ("en", "zh"):
            model.info.update(with_dev(info, devs, lang, args.dev_cap, args.set_cap))
        model.save(args.out, fingerprint)
    size = args.out.stat().st_size
    print(f"wrote {args.out} ({size / 1024:.0f} KiB) in {time.perf_counter() - t0:.0f} s")
    print(json.dumps(SoftmaxModel.load(args.out)[0].info, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
