"""The classifier head's hidden layer: torch training, numpy scoring, saving and loading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleetgate.safety.classifier.model import Hidden, SoftmaxModel

torch = pytest.importorskip("torch")
scipy_sparse = pytest.importorskip("scipy.sparse")

from fleetgate_training.classifier.fit_hidden import fit_hidden  # noqa: E402
from fleetgate_training.classifier.fit_softmax import fit_softmax  # noqa: E402


def _xor(n: int = 800, seed: int = 0) -> tuple[np.ndarray, object, list[str]]:
    """Two embedding columns whose label is the XOR of their signs (no linear model separates
    it) and an all-zero sparse n-gram block beside them."""
    rng = np.random.default_rng(seed)
    first = rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    labels = ["harm" if (a > 0) != (b > 0) else "benign" for a, b in first]
    return first, scipy_sparse.csr_matrix((n, 16), dtype=np.float32), labels


def _accuracy(model: SoftmaxModel, blocks: tuple[np.ndarray, object], labels: list[str]) -> float:
    predicted = np.argmax(model.predict_proba(blocks), axis=1)
    return float(
        np.mean([model.classes[int(i)] == y for i, y in zip(predicted, labels, strict=True)])
    )


def test_the_hidden_layer_learns_what_the_softmax_layer_cannot() -> None:
    first, grams, labels = _xor()
    hidden = fit_hidden((first, grams), labels, hidden=32, epochs=60, dropout=0.0)
    linear = fit_softmax((first, grams), labels, epochs=300)
    assert hidden.hidden is not None and linear.hidden is None
    assert _accuracy(hidden, (first, grams), labels) > 0.9
    assert _accuracy(linear, (first, grams), labels) < 0.75


def test_the_sparse_block_is_learned_too() -> None:
    """The n-gram block's weights are trained with the rest: a label carried by one n-gram
    column alone (the embedding is noise) is learned."""
    rng = np.random.default_rng(1)
    n = 400
    first = rng.normal(size=(n, 4)).astype(np.float32)
    marked = rng.random(n) < 0.5
    grams = scipy_sparse.csr_matrix(
        (
            np.ones(int(marked.sum()), np.float32),
            (np.flatnonzero(marked), np.full(int(marked.sum()), 3)),
        ),
        shape=(n, 8),
    )
    labels = ["harm" if m else "benign" for m in marked]
    model = fit_hidden((first, grams), labels, hidden=8, epochs=30, lr=2e-2)
    assert _accuracy(model, (first, grams), labels) > 0.97
    assert model.weights.shape == (4 + 8, 2)


def test_training_is_seeded_and_leaves_torch_s_random_state_alone() -> None:
    first, grams, labels = _xor(200)
    before = torch.random.get_rng_state()
    a = fit_hidden((first, grams), labels, hidden=16, epochs=5, seed=3)
    assert torch.equal(torch.random.get_rng_state(), before)
    b = fit_hidden((first, grams), labels, hidden=16, epochs=5, seed=3)
    c = fit_hidden((first, grams), labels, hidden=16, epochs=5, seed=4)
    assert a.hidden is not None and b.hidden is not None and c.hidden is not None
    assert np.array_equal(a.weights, b.weights) and np.array_equal(a.hidden.w1, b.hidden.w1)
    assert not np.array_equal(a.hidden.w1, c.hidden.w1)


def test_a_model_with_a_hidden_layer_scores_the_same_after_saving(tmp_path: Path) -> None:
    first, grams, labels = _xor(300)
    model = fit_hidden((first, grams), labels, hidden=16, epochs=20)
    model.info = {"threshold": "0.5"}
    model.save(tmp_path / "m.npz", "fp")
    again, fingerprint = SoftmaxModel.load(tmp_path / "m.npz")
    assert fingerprint == "fp" and again.info == {"threshold": "0.5"}
    assert again.hidden is not None and again.hidden.inputs == 2
    assert (
        np.abs(again.predict_proba((first, grams)) - model.predict_proba((first, grams))).max()
        < 1e-2
    )
    dense = np.hstack([first, grams.toarray()])  # one dense matrix: the embedding comes first
    assert np.abs(again.predict_proba(dense) - model.predict_proba((first, grams))).max() < 1e-2


def test_inputs_the_hidden_layer_cannot_read_are_errors() -> None:
    first, grams, labels = _xor(100)
    model = fit_hidden((first, grams), labels, hidden=4, epochs=1)
    with pytest.raises(ValueError, match="dense embedding"):
        model.predict_proba((scipy_sparse.csr_matrix(first), grams))
    with pytest.raises(ValueError, match="columns"):
        model.predict_proba((first, grams[:, :8]))
    with pytest.raises(ValueError, match="dense embedding"):
        fit_hidden((scipy_sparse.csr_matrix(first), grams), labels)
    with pytest.raises(ValueError, match="same number of rows"):
        fit_hidden((first, grams[:50]), labels)
    with pytest.raises(ValueError, match="disagree"):
        Hidden(np.zeros((2, 4), np.float32), np.zeros(3, np.float32), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="shape"):
        SoftmaxModel(["a", "b"], np.zeros((2, 2), np.float32), np.zeros(2, np.float32),
                     hidden=Hidden(np.zeros((5, 4), np.float32), np.zeros(4, np.float32),
                                   np.zeros((4, 2), np.float32)))  # fmt: skip
