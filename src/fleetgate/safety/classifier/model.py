"""Multinomial logistic regression in numpy: small, dependency-free, saved as one ``.npz``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["SoftmaxModel"]

Floats = npt.NDArray[np.float32]


Blocks = Sequence[Any]  # column blocks of one design matrix: numpy arrays or scipy.sparse


def _blocks(x: Floats | Blocks, width: int | None = None) -> list[Any]:
    """``x`` as a list of column blocks (one matrix, dense or sparse, is one block), checked to
    share their row count and, given ``width``, to add up to it: a matrix built with another
    n-gram size than the model's must fail, not score with part of the weights."""
    blocks = [x] if hasattr(x, "shape") else list(x)
    if not blocks or len({int(b.shape[0]) for b in blocks}) != 1:
        raise ValueError("the feature blocks must be non-empty and have the same number of rows")
    total = sum(int(b.shape[1]) for b in blocks)
    if width is not None and total != width:
        raise ValueError(f"{total} feature columns, but the model has {width}")
    return blocks


def _softmax(z: Floats) -> Floats:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    out: Floats = e / e.sum(axis=1, keepdims=True)
    return out


class SoftmaxModel:
    """``p(class | x) = softmax(x W + b)``, trained with class-weighted, L2-regularised Adam.

    ``info``: string facts saved with the weights (the training data's hash, the embedder, the
    threshold chosen on validation data, ...).
    """

    def __init__(
        self,
        classes: Sequence[str],
        weights: Floats,
        bias: Floats,
        info: Mapping[str, str] | None = None,
    ) -> None:
        self.classes = tuple(classes)
        self.weights = weights
        self.bias = bias
        self.info: dict[str, str] = dict(info or {})

    @classmethod
    def fit(
        cls,
        x: Floats | Blocks,
        labels: Sequence[str],
        *,
        class_weight: Mapping[str, float] | None = None,
        l2: float = 1e-4,
        epochs: int = 400,
        lr: float = 0.05,
        seed: int = 0,
    ) -> SoftmaxModel:
        """Full-batch training in float32; deterministic for a given ``seed``.

        ``x``: the design matrix, or its column blocks side by side (dense arrays or
        ``scipy.sparse`` matrices: the same model, far fewer multiplications when a block is
        mostly zeros). ``class_weight`` scales each class's examples (default: balanced across
        classes).
        """
        blocks = [b if hasattr(b, "tocsr") else np.ascontiguousarray(b, dtype=np.float32)
                  for b in _blocks(x)]  # fmt: skip
        widths = [int(b.shape[1]) for b in blocks]
        transposed = [b.T.tocsr() if hasattr(b, "tocsr") else b.T for b in blocks]
        classes = sorted(set(labels))
        index = {c: i for i, c in enumerate(classes)}
        y = np.array([index[c] for c in labels])
        n, d = int(blocks[0].shape[0]), sum(widths)
        k = len(classes)
        onehot = np.zeros((n, k), dtype=np.float32)
        onehot[np.arange(n), y] = 1.0
        counts = onehot.sum(axis=0)
        if class_weight is None:
            per_class = n / (k * counts)
        else:
            per_class = np.array([class_weight.get(c, 1.0) for c in classes])
        sample_w = (per_class[y][:, None] / n).astype(np.float32)
        rng = np.random.default_rng(seed)
        w = rng.normal(0.0, 0.01, (d, k)).astype(np.float32)
        b = np.zeros(k, dtype=np.float32)
        starts = np.cumsum([0, *widths])
        parts = [slice(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]
        m_w, v_w, m_b, v_b = np.zeros_like(w), np.zeros_like(w), np.zeros_like(b), np.zeros_like(b)
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        for t in range(1, epochs + 1):
            z = sum((blk @ w[part] for blk, part in zip(blocks, parts, strict=True)), b)
            grad_z = (_softmax(np.asarray(z, dtype=np.float32)) - onehot) * sample_w
            g_w = np.vstack([np.asarray(blk_t @ grad_z) for blk_t in transposed]) + l2 * w
            g_b = grad_z.sum(axis=0)
            m_w = beta1 * m_w + (1 - beta1) * g_w
            v_w = beta2 * v_w + (1 - beta2) * g_w**2
            m_b = beta1 * m_b + (1 - beta1) * g_b
            v_b = beta2 * v_b + (1 - beta2) * g_b**2
            corr1, corr2 = 1 - beta1**t, 1 - beta2**t
            w -= lr * (m_w / corr1) / (np.sqrt(v_w / corr2) + eps)
            b -= lr * (m_b / corr1) / (np.sqrt(v_b / corr2) + eps)
        return cls(classes, w, b)

    def hash_dim(self, embedding_dim: int) -> int:
        """How many hashed n-gram columns follow an ``embedding_dim`` embedding in the input."""
        return int(self.weights.shape[0]) - embedding_dim

    def predict_proba(self, x: Floats | Blocks) -> Floats:
        """Class probabilities, one row per input row, columns in ``classes`` order (``x`` as
        in `fit`: one matrix or its column blocks)."""
        z, start = self.bias, 0
        for blk in _blocks(x, int(self.weights.shape[0])):
            width = int(blk.shape[1])
            z = z + blk @ self.weights[start : start + width]
            start += width
        return _softmax(np.asarray(z, dtype=np.float32))

    def save(self, path: Path, fingerprint: str) -> None:
        """Write atomically (temp file + rename) so a crashed write never leaves a bad cache.

        The weights are stored as float16 (half the file; rounding moves each weight by at most
        1 part in 2,000) and read back as float32."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("wb") as fh:
            np.savez_compressed(
                fh,
                classes=np.array(self.classes),
                weights=self.weights.astype(np.float16),
                bias=self.bias,
                fingerprint=np.array(fingerprint),
                info=np.array(json.dumps(self.info, sort_keys=True)),
            )
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> tuple[SoftmaxModel, str]:
        """The model and the fingerprint of the data and features it was trained on."""
        with np.load(path, allow_pickle=False) as data:
            classes = [str(c) for c in data["classes"]]
            info = json.loads(str(data["info"])) if "info" in data.files else {}
            weights = np.asarray(data["weights"], dtype=np.float32)
            bias = np.asarray(data["bias"], dtype=np.float32)
            model = cls(classes, weights, bias, {str(k): str(v) for k, v in info.items()})
            return model, str(data["fingerprint"])
