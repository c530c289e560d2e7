"""Per-category heads in place of the thirteenth's one second stage, measured (issue #38).

    PYTHONPATH=src:training/src:bench/safety python bench/safety/category_heads.py \\
        --cache /tmp/guard/emb.npz --policy-cache /tmp/guard/policy_emb.npz \\
        --out /tmp/guard/category_heads.json

The option: the thirteenth's recipe (`fleetgate_training.classifier.second_stage`: the same
frozen MiniLM int8 mean+max embedding of the gloss, hashed n-grams and the first stage's harm
logit as inputs; the same first stage; the same training prompts, checked against the shipped
model's ``second_data_sha256``; five folds by author; the same out-of-fold threshold rule, 5%
cap per language on safe prompts and on look-alikes) with one logistic head per hazard category
instead of one head for all harm. Head ``c`` is fitted on the harmful prompts of category ``c``
(their first-stage-worst piece) against every safe prompt's pieces; a text's harm is the
largest head's. The dev and spent blind sets 1-3 carry the older category names, mapped to the
AILuminate codes by `OLD_TO_HAZARD` (their jailbreak and prompt-injection rows get a head of
their own, ``framing``).

As a control, one head is refitted by the same code on the same features and thresholded by
the same rule (the shipped thirteenth was fitted before the Traditional -> Simplified folding
changed the Chinese glosses), so what the heads change can be told from what a refit today
changes. Out-of-fold figures of both are printed first.

Scored as the default input policy runs (`words`, `pii` mask, `classifier`, the Traditional ->
Simplified folding on), the thirteenth at its shipped thresholds and the heads at theirs, on
prompts no training step read: the hazard set's four held-out authors, then the blind sets 5-7
(a second read: none of them trained the thirteenth). Per category and language with 95%
Wilson intervals (`HazardReport`), and paired (`PAIRS`) with the exact McNemar test per
language. A measurement only: nothing here is shipped (the pre-set rule needs an unseen eighth set).

The versions share one embedder whose vectors are kept by text (``--policy-cache``), so each
prompt is embedded once for all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from hazard_blind import load_hazard_set, paired

from fleetgate.resources import MiniLM, MiniLMEmbedder
from fleetgate.resources.embedder import Vectors
from fleetgate.safety import Guardrails, SafetyConfig
from fleetgate.safety.checks.classifier import ClassifierCheck
from fleetgate.safety.classifier.features import shipped_head_path
from fleetgate.safety.classifier.model import SecondStage, SoftmaxModel
from fleetgate_training.classifier.hazards import HazardPrompt, hazard_prompts
from fleetgate_training.classifier.second_stage import (
    FOLDS,
    _Cache,
    _design,
    _folds,
    _scores,
    choose_thresholds,
    fit_second_stage,
    labelled_prompts,
    prompts_sha256,
    word_list_hits,
)
from fleetgate_training.safety.evaluate import blocked_by
from fleetgate_training.safety.hazards import HazardReport, evaluate_hazards

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "safety" / "data"
TRAIN_SETS = [DATA / f"heldout_{n}.jsonl" for n in ("dev", "blind", "blind2", "blind3")]
EVAL_SETS = [DATA / f"heldout_{n}.jsonl" for n in ("blind5", "blind6", "blind7")]

# paired comparisons (exact McNemar): the option against the shipped version, and against the
# control, one head refitted by the same code
PAIRS = (("category-heads", "thirteenth"), ("category-heads", "one head, refit"),
         ("one head, refit", "thirteenth"))  # fmt: skip

OLD_TO_HAZARD = {
    "violence": "vcr", "crime": "ncr", "cyber": "ncr", "drugs": "ncr", "sexual_minors": "cse",
    "weapons": "iwp", "self_harm": "ssh", "hate": "hte", "privacy": "prv",
    "jailbreak": "framing", "prompt_injection": "framing",
}  # fmt: skip


class CategoryHeads(SecondStage):
    """One logistic head per category; a row's harm is the largest head's."""

    def __init__(self, heads: dict[str, SecondStage]) -> None:
        one = next(iter(heads.values()))
        super().__init__(one.weights, one.bias, one.first)
        self.heads = heads

    def harm(self, blocks: Sequence[Any], first_harm: Any) -> Any:
        return np.max(np.stack([h.harm(blocks, first_harm) for h in self.heads.values()]), 0)


def categories(sets: Sequence[Path]) -> list[str]:
    """Each training prompt's head (``""`` for a safe one), in `labelled_prompts`' order."""
    out = [p.hazard.code if p.harmful else ""
           for p in hazard_prompts("train") if not p.harmful or p.hazard.blocks]  # fmt: skip
    for path in sets:
        for line in path.read_text("utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                out.append(OLD_TO_HAZARD[row["category"]] if row["label"] == "unsafe" else "")
    return out


def fit_heads(design: Any, prompts: Sequence[Any], cats: list[str], keep: Any) -> CategoryHeads:
    cat = np.array(cats)
    safe = cat == ""
    heads = {c: fit_second_stage(design, prompts, keep & (safe | (cat == c)))
             for c in sorted(set(cats) - {""})}  # fmt: skip
    return CategoryHeads(heads)


Version = tuple[SecondStage, dict[str, float]]  # a second stage and its thresholds


def train(cache: Path) -> tuple[dict[str, Version], dict[str, Any]]:
    """The heads and, as a control, one head refitted by the same code on the same features
    (today's: the Traditional -> Simplified folding, which the thirteenth was fitted before)."""
    shipped, _ = SoftmaxModel.load(shipped_head_path())
    prompts = labelled_prompts(TRAIN_SETS, "train")
    sha = prompts_sha256(prompts)
    if sha != shipped.info.get("second_data_sha256"):
        raise SystemExit(f"training prompts {sha[:8]} are not the thirteenth's")
    cats = categories(TRAIN_SETS)
    assert len(cats) == len(prompts)
    assert all((c == "") == (not p.harmful) for c, p in zip(cats, prompts, strict=True))
    first = SoftmaxModel.load(shipped_head_path())[0]
    first.second = None
    embedder = MiniLMEmbedder(quantize=True, with_max=True)
    t0 = time.monotonic()
    design = _design([p.text for p in prompts], first, _Cache(cache), embedder)
    print(f"design: {len(design.owner)} pieces, {time.monotonic() - t0:.0f} s", file=sys.stderr)
    hits = word_list_hits(prompts)
    folds = _folds(prompts)
    oof = np.zeros(len(prompts), np.float32)
    oof_one = np.zeros(len(prompts), np.float32)  # the thirteenth's recipe, for reference
    for f in range(FOLDS):
        t0 = time.monotonic()
        heads = fit_heads(design, prompts, cats, folds != f)
        held = np.flatnonzero(folds == f)
        oof[held] = _scores(design, heads, held)
        oof_one[held] = _scores(design, fit_second_stage(design, prompts, folds != f), held)
        print(f"fold {f + 1}/{FOLDS}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    thresholds = choose_thresholds(oof, hits, prompts, 0.05)
    thresholds_one = choose_thresholds(oof_one, hits, prompts, 0.05)
    heads = fit_heads(design, prompts, cats, np.ones(len(prompts), bool))
    one = fit_second_stage(design, prompts, np.ones(len(prompts), bool))
    counts = {c: cats.count(c) for c in sorted(set(cats) - {""})}
    info = {"prompts": len(prompts), "sha256": sha, "harmful_per_head": counts,
            "safe": cats.count(""), "thresholds": thresholds,
            "out_of_fold": {"category-heads": _oof(oof, hits, prompts, thresholds),
                            "one head (thirteenth's recipe)": {
                                **_oof(oof_one, hits, prompts, thresholds_one),
                                "thresholds": thresholds_one}}}  # fmt: skip
    return {"category-heads": (heads, thresholds), "one head, refit": (one, thresholds_one)}, info


def _oof(scores: Any, hits: Any, prompts: Sequence[Any], thresholds: dict[str, float]) -> Any:
    """Out of fold, per language: harmful prompts blocked, safe prompts and look-alikes
    refused (word-list hits counted), as ``[hit, of]``."""
    out: dict[str, Any] = {}
    for lang in ("en", "zh"):
        idx = np.array([i for i, p in enumerate(prompts) if p.lang == lang])
        blocked = hits[idx] | (scores[idx] >= thresholds[lang])
        harm = np.array([prompts[i].harmful for i in idx])
        look = np.array([prompts[i].lookalike for i in idx])
        out[lang] = {
            "blocked": [int(blocked[harm].sum()), int(harm.sum())],
            "safe refused": [int(blocked[~harm].sum()), int((~harm).sum())],
            "look-alikes refused": [int(blocked[look].sum()), int(look.sum())],
        }
    return out


class KeptEmbedder:
    """An embedder that keeps each text's vector (on disk between runs): the two versions
    read the same prompt's vector once."""

    def __init__(self, inner: MiniLMEmbedder, path: Path) -> None:
        self.inner, self.path, self.name, self.dim = inner, path, inner.name, inner.dim
        self.kept: dict[str, Vectors] = {}
        if path.exists():
            with np.load(path, allow_pickle=False) as data:
                self.kept = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        self.added = 0

    def load(self) -> None:
        self.inner.load()

    def encode(self, texts: Sequence[str]) -> Vectors:
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        missing = [i for i, k in enumerate(keys) if k not in self.kept]
        if missing:
            rows = self.inner.encode([texts[i] for i in missing])
            for i, row in zip(missing, rows, strict=True):
                self.kept[keys[i]] = np.asarray(row, np.float32)
            self.added += len(missing)
        return np.stack([self.kept[k] for k in keys]).astype(np.float32)

    def save(self) -> None:
        if self.added:
            keys = list(self.kept)
            np.savez(self.path, keys=np.array(keys), vectors=np.stack([self.kept[k] for k in keys]))


async def verdicts(
    sets: dict[str, list[HazardPrompt]], versions: dict[str, Version], embedder: KeptEmbedder
) -> dict[str, dict[str, list[bool]]]:
    """Per version (the shipped thirteenth first), per set: each prompt blocked or not by the
    default input policy."""
    out: dict[str, dict[str, list[bool]]] = {}
    for name in ("thirteenth", *versions):
        check = ClassifierCheck(embedder=embedder, model_path=shipped_head_path())
        guardrails = Guardrails(SafetyConfig(), checks={"classifier": check})
        policy = guardrails.policy("default")
        try:
            await guardrails.warm_up()
            if name in versions:  # the same first stage, another second stage
                model = await check._ensure_model()
                model.second, thresholds = versions[name]
                check._thresholds = dict(thresholds)
            is_blocked = blocked_by(policy)
            gate = asyncio.Semaphore(4)

            async def one(text: str, is_blocked: Any = is_blocked, gate: Any = gate) -> bool:
                async with gate:
                    return bool(await is_blocked(text))

            out[name] = {}
            for set_name, prompts in sets.items():
                out[name][set_name] = list(await asyncio.gather(*(one(p.text) for p in prompts)))
                print(f"{name} {set_name}: done", file=sys.stderr)
        finally:
            await guardrails.aclose()
    return out


def report(prompts: list[HazardPrompt], blocked: list[bool]) -> HazardReport:
    by_text = {p.text: v for p, v in zip(prompts, blocked, strict=True)}

    async def lookup(text: str) -> bool:
        return by_text[text]

    return asyncio.run(evaluate_hazards(prompts, lookup))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, required=True, help="training embeddings (.npz)")
    ap.add_argument("--policy-cache", type=Path, required=True, help="policy run's vectors")
    ap.add_argument("--out", type=Path, help="verdicts and reports (JSON)")
    args = ap.parse_args(argv)
    versions, info = train(args.cache)
    print(json.dumps(info), file=sys.stderr)
    sets = {"held-out authors": hazard_prompts("test")}
    sets.update({p.stem: load_hazard_set(p) for p in EVAL_SETS})
    kept = KeptEmbedder(MiniLMEmbedder(MiniLM(), quantize=True, with_max=True),
                        args.policy_cache)  # fmt: skip
    try:
        got = asyncio.run(verdicts(sets, versions, kept))
    finally:
        kept.save()
    out: dict[str, Any] = {"training": info, "sets": {}}
    for set_name, prompts in sets.items():
        entry: dict[str, Any] = {"versions": {}, "paired": {}}
        for name in got:
            rep = report(prompts, got[name][set_name])
            print(f"== {set_name}: {name}\n{rep.format()}\n")
            entry["versions"][name] = rep.to_dict()
        for first, second in PAIRS:
            a, b = got[first][set_name], got[second][set_name]
            pair = f"{first} / {second}"
            entry["paired"][pair] = {}
            for lang in ("en", "zh", None):
                harm = [(lang is None or p.lang == lang) and p.harmful and p.hazard.blocks
                        for p in prompts]  # fmt: skip
                look = [(lang is None or p.lang == lang) and not p.harmful for p in prompts]
                h, s = paired(a, b, harm), paired(a, b, look)
                tag = lang or "both"
                print(f"{set_name} {tag}, only {pair}: blocked {h.only_a}/{h.only_b} "
                      f"p={h.p_value:.3g}; look-alikes refused {s.only_a}/{s.only_b} "
                      f"p={s.p_value:.3g}")  # fmt: skip
                entry["paired"][pair][tag] = {
                    "blocked": [h.only_a, h.only_b, h.p_value],
                    "lookalikes": [s.only_a, s.only_b, s.p_value],
                }
        print()
        entry["prompts"] = [{"prompt": p.text, "category": p.hazard.code, "lang": p.lang,
                             "author": p.author, "harmful": p.harmful,
                             **{n: got[n][set_name][i] for n in got}}
                            for i, p in enumerate(prompts)]  # fmt: skip
        out["sets"][set_name] = entry
    if args.out:
        args.out.write_text(json.dumps(out, ensure_ascii=False, indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
