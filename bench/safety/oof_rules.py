"""Compare decision rules on the classifier's out-of-fold scores (`train_classifier.py --oof`).

    PYTHONPATH=src python bench/safety/oof_rules.py --scores /tmp/fg-oof.npz

Every rule is the shipped input policy (word lists OR classifier) with the classifier's decision
made one way or another from its class probabilities, per language, with its parameters chosen
for at most 8% of benign prompts blocked (issue #19). Each rule is fitted on four folds' scores
and measured on the fifth, for each of the five folds, so the figures printed are never the
fitting figures. Rules:

- ``benign``: 1 - p(benign) >= t (the shipped rule);
- ``maxharm``: max over harm classes of p(c) >= t;
- ``temp T``: 1 - p(benign) after dividing the logits by T (T=1 is ``benign``);
- ``percat``: p(c) >= t_c for any harm class c, the t_c found by coordinate ascent
  (`fit_per_category`);
- ``ratio``: p(c) / p(benign) >= r_c for any harm class c (coordinate ascent in log space);
- ``wsum``: sum over harm classes of w_c p(c) >= 1 (all w_c = 1 / t is ``benign``; the
  weights by coordinate ascent, `fit_weighted_sum`).

bench/safety/data/heldout_*.jsonl are never read here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from thresholds import (  # noqa: E402
    GRID,
    Bools,
    Floats,
    fit_per_category,
    fit_weighted_sum,
    fmt,
    lowest_feasible,
)


def single(score_fn: Callable[[Floats], Floats]) -> Callable[..., Bools]:
    def rule(p_fit: Floats, w_fit: Bools, ben_fit: Bools, p_app: Floats, w_app: Bools) -> Bools:
        t = lowest_feasible(score_fn(p_fit), w_fit, ben_fit, GRID)
        return w_app | (score_fn(p_app) >= t)

    return rule


def percat(transform: Callable[[Floats], Floats], grid: Floats) -> Callable[..., Bools]:
    def rule(p_fit: Floats, w_fit: Bools, ben_fit: Bools, p_app: Floats, w_app: Bools) -> Bools:
        cat_fit = transform(p_fit)
        start = lowest_feasible(cat_fit.max(axis=1), w_fit, ben_fit, grid)
        t = fit_per_category(cat_fit, w_fit, ben_fit, grid, start)
        return w_app | (transform(p_app) >= t).any(axis=1)

    return rule


def wsum(harm_cols: list[int], b: int) -> Callable[..., Bools]:
    def rule(p_fit: Floats, w_fit: Bools, ben_fit: Bools, p_app: Floats, w_app: Bools) -> Bools:
        start = lowest_feasible(1.0 - p_fit[:, b], w_fit, ben_fit, GRID)
        w = fit_weighted_sum(p_fit[:, harm_cols], w_fit, ben_fit, start)
        return w_app | (p_app[:, harm_cols] @ w >= 1.0)

    return rule


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scores", type=Path, default=Path("/tmp/fg-oof.npz"))
    args = ap.parse_args()
    with np.load(args.scores, allow_pickle=False) as data:
        d = {k: data[k] for k in data.files}
    classes = [str(c) for c in d["classes"]]
    b = classes.index("benign")
    harm_cols = [i for i in range(len(classes)) if i != b]
    proba = d["proba"].astype(np.float64)
    logp = np.log(np.clip(proba, 1e-12, 1.0))

    def temp(t: float) -> Callable[[Floats], Floats]:
        def f(p: Floats) -> Floats:
            z = np.log(np.clip(p, 1e-12, 1.0)) / t
            z -= z.max(axis=1, keepdims=True)
            e = np.exp(z)
            return 1.0 - e[:, b] / e.sum(axis=1)

        return f

    log_grid = np.round(np.arange(-6.0, 6.01, 0.1), 2)
    rules: dict[str, Callable[..., Bools]] = {
        "benign": single(lambda p: 1.0 - p[:, b]),
        "maxharm": single(lambda p: p[:, harm_cols].max(axis=1)),
        "temp 0.5": single(temp(0.5)),
        "temp 2": single(temp(2.0)),
        "wsum": wsum(harm_cols, b),
        "percat": percat(lambda p: p[:, harm_cols], GRID),
        "ratio": percat(
            lambda p: (
                np.log(np.clip(p[:, harm_cols], 1e-12, 1)) - np.log(np.clip(p[:, [b]], 1e-12, 1))
            ),
            log_grid,
        ),
    }
    del logp
    folds = sorted(set(d["fold"].tolist()))
    for lang in ("en", "zh"):
        print(f"\n== {lang} (fit on 4 folds, measured on the 5th; words + classifier)")
        sel = d["lang"] == lang
        p, w = proba[sel], d["words"][sel]
        benign = d["label"][sel] == "benign"
        fold = d["fold"][sel]
        base: list[tuple[float, float]] = []
        for name, rule in rules.items():
            tp = fp = nh = nb = 0
            cells, deltas = [], []
            for i, f in enumerate(folds):
                fit, app = fold != f, fold == f
                blocked = rule(p[fit], w[fit], benign[fit], p[app], w[app])
                h, s = ~benign[app], benign[app]
                tp += int(blocked[h].sum())
                fp += int(blocked[s].sum())
                nh += int(h.sum())
                nb += int(s.sum())
                rate = (float(blocked[h].mean()), float(blocked[s].mean()))
                cells.append(f"{rate[0]:.1%}/{rate[1]:.1%}")
                if name == "benign":
                    base.append(rate)
                else:
                    deltas.append(
                        f"{100 * (rate[0] - base[i][0]):+.1f}/{100 * (rate[1] - base[i][1]):+.1f}"
                    )
            print(f"  {name:9s} pooled blocked {fmt(tp, nh)}  FP {fmt(fp, nb)}")
            print(f"            per fold (blocked/FP): {'  '.join(cells)}")
            if deltas:
                print(f"            vs benign (points):    {'  '.join(deltas)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
