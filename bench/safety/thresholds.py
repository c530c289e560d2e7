"""Choosing the classifier's thresholds at issue #19's false-positive aim (at most 8% of benign
prompts blocked by the word lists or the classifier), from out-of-fold scores; used by
`train_classifier.py` and `oof_rules.py`."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = [
    "FP_AIM",
    "GRID",
    "Bools",
    "Floats",
    "fit_per_category",
    "fit_weighted_sum",
    "fmt",
    "lowest_feasible",
    "wilson",
]

FP_AIM = 0.08
GRID = np.round(np.arange(0.02, 0.991, 0.01), 2)
Bools = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float64]


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (c - h, c + h)


def fmt(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {k / n:.1%} [{lo:.1%}, {hi:.1%}]"


def lowest_feasible(
    score: Floats, words: Bools, benign: Bools, grid: Floats, aim: float = FP_AIM
) -> float:
    """The lowest grid threshold at which words | score >= t blocks <= ``aim`` of benign."""
    fp = ((score[benign][:, None] >= grid[None, :]) | words[benign][:, None]).mean(axis=0)
    ok = np.nonzero(fp <= aim)[0]
    return float(grid[ok[0]]) if len(ok) else float(grid[-1])


def _ascend(cat: Floats, words: Bools, benign: Bools, grid: Floats, start: float, lam: float,
            rounds: int) -> Floats:  # fmt: skip
    """Coordinate ascent on (harmful blocked) - lam * (benign blocked), from ``start``."""
    k = cat.shape[1]
    t = np.full(k, start)
    harm = ~benign
    for _ in range(rounds):
        changed = False
        for c in range(k):
            others = words | (np.delete(cat, c, axis=1) >= np.delete(t, c)).any(axis=1)
            hit = others[:, None] | (cat[:, c][:, None] >= grid[None, :])
            gain = hit[harm].sum(axis=0) - lam * hit[benign].sum(axis=0)
            best = float(grid[np.flatnonzero(gain == gain.max())[-1]])  # ties: the higher
            if best != t[c]:
                changed, t[c] = True, best
        if not changed:
            break
    return t


LAMBDAS = tuple(float(x) for x in np.geomspace(0.25, 16.0, 25))


def fit_per_category(
    cat: Floats, words: Bools, benign: Bools, grid: Floats, start: float, rounds: int = 8
) -> Floats:
    """Per-class thresholds ``t`` (block when any ``cat[:, c] >= t[c]``) for the most harmful
    prompts blocked with at most `FP_AIM` of the benign ones: for each price ``lam`` of a
    false positive (`LAMBDAS`), coordinate ascent on blocked harmful - lam * blocked benign
    (from ``start`` for every class; each step the best value of one class's threshold with the
    others fixed); the best of those within the false-positive aim, else ``start`` for all."""
    harm = ~benign
    budget = FP_AIM * benign.sum()
    best_t, best_tp = np.full(cat.shape[1], start), -1
    for lam in LAMBDAS:
        t = _ascend(cat, words, benign, grid, start, lam, rounds)
        blocked = words | (cat >= t).any(axis=1)
        tp = int(blocked[harm].sum())
        if blocked[benign].sum() <= budget + 1e-9 and tp > best_tp:
            best_t, best_tp = t, tp
    return best_t


WEIGHTS = np.round(np.arange(0.0, 6.001, 0.05), 2)


def _ascend_weights(cat: Floats, words: Bools, benign: Bools, start: Floats, lam: float,
                    rounds: int) -> Floats:  # fmt: skip
    w = start.copy()
    harm = ~benign
    for _ in range(rounds):
        changed = False
        for c in range(cat.shape[1]):
            rest = cat @ w - cat[:, c] * w[c]
            hit = words[:, None] | (rest[:, None] + cat[:, c][:, None] * WEIGHTS[None, :] >= 1.0)
            gain = hit[harm].sum(axis=0) - lam * hit[benign].sum(axis=0)
            best = float(WEIGHTS[np.flatnonzero(gain == gain.max())[0]])  # ties: the lower
            if best != w[c]:
                changed, w[c] = True, best
        if not changed:
            break
    return w


def fit_weighted_sum(
    cat: Floats, words: Bools, benign: Bools, start: float, rounds: int = 8
) -> Floats:
    """Per-class weights ``w`` (block when ``sum_c w[c] * cat[:, c] >= 1``; all ``1 / t`` is
    the single threshold ``t`` on the summed harm probability), found like
    `fit_per_category`."""
    harm = ~benign
    budget = FP_AIM * benign.sum()
    w0 = np.full(cat.shape[1], round(1.0 / start, 2))
    best_w, best_tp = w0, -1
    for lam in LAMBDAS:
        w = _ascend_weights(cat, words, benign, w0, lam, rounds)
        blocked = words | (cat @ w >= 1.0)
        tp = int(blocked[harm].sum())
        if blocked[benign].sum() <= budget + 1e-9 and tp > best_tp:
            best_w, best_tp = w, tp
    return best_w
