"""The rule that sets the shipped classifier's thresholds (bench/safety/train_classifier.py,
step 3): the lowest threshold at which the dev sets pooled stay under one cap and each set
under another, per language."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "safety"))
from thresholds import GRID, lowest_feasible  # noqa: E402
from train_classifier import with_dev  # noqa: E402


def _dev(harm: list[float], benign: list[bool], lang: str = "en") -> dict[str, np.ndarray]:
    return {
        "harm": np.array(harm),
        "words": np.zeros(len(harm), dtype=bool),
        "benign": np.array(benign),
        "lang": np.array([lang] * len(harm)),
    }


def test_lowest_feasible_takes_the_cap_it_is_given() -> None:
    score = np.array([0.10, 0.30, 0.50, 0.70])
    benign = np.ones(4, dtype=bool)
    words = np.zeros(4, dtype=bool)
    assert lowest_feasible(score, words, benign, GRID, aim=0.25) == 0.51  # one of four at 0.70
    assert lowest_feasible(score, words, benign, GRID, aim=0.5) == 0.31
    words[0] = True  # a word-list hit counts at every threshold
    assert lowest_feasible(score, words, benign, GRID, aim=0.25) == 0.71


def test_each_dev_set_must_stay_under_its_cap_and_other_languages_do_not_count() -> None:
    easy = _dev([0.05, 0.10, 0.90], [True, True, False])
    hard = _dev([0.20, 0.40, 0.95, 0.97], [True, True, False, False])
    chinese = _dev([0.80, 0.85], [True, True], lang="zh")  # would need 0.86 if it counted
    hard = {k: np.concatenate([hard[k], chinese[k]]) for k in hard}
    info = with_dev({"threshold_en": "0.70"}, [("easy", easy), ("hard", hard)], "en", 0.0, 0.0)
    assert info["threshold_en"] == "0.41"  # the hard set's look-alike at 0.40 must pass
    assert float(info["threshold_oof_en"]) == 0.70  # reported, no longer a floor
    assert "easy: blocked 1/1" in info["dev_en"] and "hard: blocked 2/2" in info["dev_en"]
    assert "false positives 0/2" in info["dev_en"]  # the Chinese prompts are not counted


def test_the_dev_sets_pooled_stay_under_the_cap_and_each_under_the_aim() -> None:
    """Four sets of 25 benign prompts: pooled, 5 of 100 may be blocked (5%), so one set may
    lose 2 of its 25 (8%) where the old rule (each set under 5%) would have passed none of
    them; a set over the per-set cap still raises the threshold."""
    benign = [True] * 25 + [False]
    calm = _dev([0.05] * 25 + [0.60], benign)
    spiky = _dev([0.05] * 23 + [0.30, 0.35] + [0.60], benign)
    info = with_dev({}, [("a", calm), ("b", calm), ("c", calm), ("d", spiky)], "en", 0.05, 0.08)
    assert info["threshold_en"] == "0.06"  # pooled 2/100, "d" 2/25 = 8%
    assert "threshold_oof_en" not in info  # no out-of-fold scores: none reported
    assert "pooled: blocked 4/4" in info["dev_en"] and "false positives 2/100" in info["dev_en"]
    info = with_dev({}, [("a", calm), ("d", spiky)], "en", 0.05, 0.05)
    assert info["threshold_en"] == "0.31"  # "d" over 5% (2/25) until its 0.30 look-alike passes
