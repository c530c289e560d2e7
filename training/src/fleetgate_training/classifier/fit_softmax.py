"""Training the classifier's softmax layer alone, in numpy (no hidden layer, no torch).

Class-weighted, L2-regularised full-batch Adam over the design matrix or its column blocks;
the result is a plain `SoftmaxModel`. `fit_hidden` trains the softmax layer with a hidden layer
(the shipped head); this one is the quick variant (``train(..., hidden=0)``, tests, benches).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fleetgate.safety.classifier.model import (
    Blocks,
    Floats,
    SoftmaxModel,
    column_blocks,
    softmax,
)

__all__ = ["fit_softmax"]


def fit_softmax(
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
              for b in column_blocks(x)]  # fmt: skip
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
        grad_z = (softmax(np.asarray(z, dtype=np.float32)) - onehot) * sample_w
        g_w = np.vstack([np.asarray(blk_t @ grad_z) for blk_t in transposed]) + l2 * w
        g_b = grad_z.sum(axis=0)
        m_w = beta1 * m_w + (1 - beta1) * g_w
        v_w = beta2 * v_w + (1 - beta2) * g_w**2
        m_b = beta1 * m_b + (1 - beta1) * g_b
        v_b = beta2 * v_b + (1 - beta2) * g_b**2
        corr1, corr2 = 1 - beta1**t, 1 - beta2**t
        w -= lr * (m_w / corr1) / (np.sqrt(v_w / corr2) + eps)
        b -= lr * (m_b / corr1) / (np.sqrt(v_b / corr2) + eps)
    return SoftmaxModel(classes, w, b)
