"""The classifier's second stage (issue #38): its arithmetic at run time, its file format, and
the tooling that fits it and chooses its thresholds (small synthetic data, no embedder)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleetgate.safety.classifier.model import Hidden, SecondStage, SoftmaxModel
from fleetgate_training.classifier.second_stage import (
    FIRST_SCALE,
    Labelled,
    _Design,
    _folds,
    _scores,
    choose_thresholds,
    fit_second_stage,
)

CLASSES = ("benign", "crime", "violence")


def _model(second: SecondStage | None, seed: int = 0) -> tuple[SoftmaxModel, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    e, g = 6, 5
    model = SoftmaxModel(
        CLASSES,
        rng.normal(size=(e + g, 3)).astype(np.float32),
        np.array([0.3, -0.2, 0.1], np.float32),
        {"threshold_en": "0.4"},
        Hidden(
            rng.normal(size=(e, 8)).astype(np.float32),
            rng.normal(size=8).astype(np.float32),
            rng.normal(size=(8, 3)).astype(np.float32),
        ),
        second,
    )
    x = [rng.normal(size=(7, e)).astype(np.float32), rng.normal(size=(7, g)).astype(np.float32)]
    return model, x


def test_a_neutral_second_stage_gives_the_first_stages_probabilities() -> None:
    """sigmoid(logit(h1)) = h1: zero weights, zero bias and the first stage's logit at 1."""
    plain, x = _model(None)
    neutral, _ = _model(SecondStage(np.zeros(11, np.float32), 0.0, 1.0))
    assert np.allclose(neutral.predict_proba(x), plain.predict_proba(x), atol=1e-5)
    assert np.allclose(neutral.first_stage_proba(x), plain.predict_proba(x))


def test_the_second_stage_sets_the_harm_and_keeps_the_first_stages_category() -> None:
    rng = np.random.default_rng(1)
    second = SecondStage(rng.normal(size=11).astype(np.float32), -0.5, 0.7)
    model, x = _model(second)
    first, out = model.first_stage_proba(x), model.predict_proba(x)
    h1 = np.clip(1 - first[:, 0], 1e-6, 1 - 1e-6)
    z = -0.5 + 0.7 * np.log(h1 / (1 - h1)) + x[0] @ second.weights[:6] + x[1] @ second.weights[6:]
    assert np.allclose(1 - out[:, 0], 1 / (1 + np.exp(-z)), atol=1e-5)
    assert np.allclose(out.sum(axis=1), 1.0, atol=1e-5)
    assert (np.argmax(out[:, 1:], axis=1) == np.argmax(first[:, 1:], axis=1)).all()


def test_the_second_stage_is_saved_and_loaded(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    model, x = _model(SecondStage(rng.normal(size=11).astype(np.float32) * 0.1, 0.2, 0.9))
    model.save(tmp_path / "m.npz", "fp")
    loaded, fingerprint = SoftmaxModel.load(tmp_path / "m.npz")
    assert fingerprint == "fp" and loaded.second is not None
    assert loaded.second.bias == pytest.approx(0.2) and loaded.second.first == pytest.approx(0.9)
    assert np.allclose(loaded.predict_proba(x), model.predict_proba(x), atol=2e-3)  # float16
    plain, _ = _model(None)
    plain.save(tmp_path / "p.npz", "fp")
    assert SoftmaxModel.load(tmp_path / "p.npz")[0].second is None


def test_a_second_stage_of_another_width_is_refused() -> None:
    with pytest.raises(ValueError, match="second stage"):
        _model(SecondStage(np.zeros(10, np.float32), 0.0, 1.0))
    with pytest.raises(ValueError, match="one column"):
        SecondStage(np.zeros((11, 2), np.float32), 0.0, 1.0)


def _synthetic(n: int = 240) -> tuple[_Design, list[Labelled]]:
    """Two authors per language; harm is carried by embedding column 0 (which the first stage
    does not see: its harm is noise around 0.5)."""
    from scipy.sparse import csr_matrix

    rng = np.random.default_rng(3)
    harmful = rng.random(n) < 0.5
    emb = rng.normal(size=(n, 4)).astype(np.float32)
    emb[:, 0] += np.where(harmful, 2.0, -2.0)
    grams = csr_matrix(rng.random((n, 3)).astype(np.float32))
    first = np.clip(0.5 + rng.normal(scale=0.05, size=n), 0.01, 0.99).astype(np.float32)
    prompts = [
        Labelled(f"t{i}", bool(harmful[i]), "en" if i % 2 else "zh", f"a{i % 4}", not harmful[i])
        for i in range(n)
    ]
    return _Design(emb, grams, np.arange(n), first), prompts


def test_the_second_stage_learns_what_the_first_missed_and_thresholds_keep_the_cap() -> None:
    design, prompts = _synthetic()
    second = fit_second_stage(design, prompts, np.ones(len(prompts), bool))
    assert second.weights.shape == (7,) and second.weights[0] > 0.5
    scores = _scores(design, second, np.arange(len(prompts)))
    harmful = np.array([p.harmful for p in prompts])
    assert scores[harmful].min() > scores[~harmful].max() - 0.5
    words = np.zeros(len(prompts), bool)
    chosen = choose_thresholds(scores, words, prompts, cap=0.05)
    for lang in ("en", "zh"):
        mine = np.array([p.lang == lang for p in prompts])
        assert (scores[mine & ~harmful] >= chosen[lang]).mean() <= 0.05
        assert (scores[mine & harmful] >= chosen[lang]).mean() >= 0.9
    words[~harmful] = True  # every safe prompt hit by a word list: no threshold can keep the cap
    assert choose_thresholds(scores, words, prompts, cap=0.05) == {"en": 1.0, "zh": 1.0}
    assert FIRST_SCALE > 0


def test_folds_never_split_an_author() -> None:
    _, prompts = _synthetic(100)
    folds = _folds(prompts)
    for author in {p.group for p in prompts}:
        assert len({int(f) for f, p in zip(folds, prompts, strict=True) if p.group == author}) == 1
