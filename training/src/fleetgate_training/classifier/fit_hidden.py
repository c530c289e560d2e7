"""Training the classifier head with a hidden layer over the sentence embedding (torch).

The head is the softmax layer over all columns (embedding and hashed n-grams, as `fit_softmax`
trains it) plus a ReLU layer over the embedding, trained jointly with class-weighted cross
entropy, AdamW and dropout on minibatches. With glossed Chinese the embedding carries the
meaning of both languages, and a non-linear reading of it blocked more at the same false
positives on the out-of-fold scores (docs/safety.md). The result is a plain `SoftmaxModel` with
a `Hidden` layer: scoring it needs numpy only. torch is imported on call (the ``ml`` extra).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fleetgate.safety.classifier.model import Blocks, Floats, Hidden, SoftmaxModel

__all__ = ["fit_hidden"]


def _start_from(
    init: SoftmaxModel,
    classes: Sequence[str],
    first: Any,
    rest: Any,
    into: Any,
    out_of: Any,
    torch: Any,
) -> None:
    """Copy ``init``'s weights into the layers (a warm start: fine-tuning a shipped model on
    new data); a class ``init`` lacks starts at zero weights and the lowest bias it has."""
    if init.hidden is None or init.hidden.w1.shape[1] != into.out_features:
        raise ValueError("a warm start needs a model with a hidden layer of the same width")
    e = into.in_features
    cols = [init.classes.index(c) if c in init.classes else -1 for c in classes]

    def pick(matrix: Floats, fill: float) -> Any:
        out = np.full((matrix.shape[0], len(cols)), fill, dtype=np.float32)
        for j, c in enumerate(cols):
            if c >= 0:
                out[:, j] = matrix[:, c]
        return torch.from_numpy(out)

    first.weight.copy_(pick(init.weights[:e], 0.0).T)
    first.bias.copy_(pick(init.bias[None, :], float(init.bias.min()))[0])
    start = e
    for w in rest:
        w.copy_(pick(init.weights[start : start + w.shape[0]], 0.0))
        start += w.shape[0]
    into.weight.copy_(torch.from_numpy(init.hidden.w1.T.copy()))
    into.bias.copy_(torch.from_numpy(init.hidden.b1.copy()))
    out_of.weight.copy_(pick(init.hidden.w2, 0.0).T)
    out_of.bias.zero_()


def _rows(block: Any, index: Any, torch: Any) -> Any:
    """Rows ``index`` of one block as a torch tensor (sparse for a ``scipy.sparse`` block)."""
    if not hasattr(block, "tocsr"):
        return torch.from_numpy(np.ascontiguousarray(block[index], dtype=np.float32))
    part = block[index].tocoo()
    coords = torch.from_numpy(np.vstack([part.row, part.col]).astype(np.int64))
    values = torch.from_numpy(part.data.astype(np.float32))
    return torch.sparse_coo_tensor(coords, values, part.shape, check_invariants=False)


def fit_hidden(
    blocks: Blocks,
    labels: Sequence[str],
    *,
    class_weight: Mapping[str, float] | None = None,
    hidden: int = 256,
    epochs: int = 16,
    batch_size: int = 256,
    lr: float = 2e-3,
    weight_decay: float = 1e-4,
    dropout: float = 0.2,
    seed: int = 0,
    init: SoftmaxModel | None = None,
) -> SoftmaxModel:
    """Train on ``blocks`` (column blocks, the first the dense embedding, the rest dense or
    ``scipy.sparse``) and return the model; deterministic for a ``seed`` on one machine."""
    import torch

    parts = list(blocks)
    if not parts or hasattr(parts[0], "tocsr") or np.ndim(parts[0]) != 2:
        raise ValueError("the first block must be the dense embedding")
    first = np.ascontiguousarray(parts[0], dtype=np.float32)
    rest = [p.tocsr() if hasattr(p, "tocsr") else np.asarray(p, np.float32) for p in parts[1:]]
    n, e = first.shape
    if any(int(p.shape[0]) != n for p in rest) or len(labels) != n:
        raise ValueError("the blocks and labels must have the same number of rows")
    classes = sorted(set(labels) | set(init.classes if init is not None else ()))
    k = len(classes)
    index = {c: i for i, c in enumerate(classes)}
    y = torch.tensor([index[c] for c in labels])
    if class_weight is None:  # balanced across classes, as `fit_softmax`
        weights = [float(v) for v in n / (k * np.bincount(y.numpy(), minlength=k))]
    else:
        weights = [class_weight.get(c, 1.0) for c in classes]
    cw = torch.tensor(weights, dtype=torch.float32)

    torch_state = torch.random.get_rng_state()  # layers and dropout draw from it; restored
    try:
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        linear_first = torch.nn.Linear(e, k)
        linear_rest = [torch.nn.Parameter(torch.zeros(int(p.shape[1]), k)) for p in rest]
        into, out_of = torch.nn.Linear(e, hidden), torch.nn.Linear(hidden, k)
        mlp = torch.nn.Sequential(into, torch.nn.ReLU(), torch.nn.Dropout(dropout), out_of)
        with torch.no_grad():  # seeded initialisation, whatever torch's global seed
            for layer in (linear_first, into, out_of):
                bound = 1.0 / float(np.sqrt(layer.in_features))
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.uniform_(-bound, bound, generator=generator)
            if init is not None:
                _start_from(init, classes, linear_first, linear_rest, into, out_of, torch)
        params = [*linear_first.parameters(), *linear_rest, *mlp.parameters()]
        optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
        order = np.random.default_rng(seed)
        mlp.train()
        for _ in range(epochs):
            perm = order.permutation(n)
            for start in range(0, n, batch_size):
                rows = perm[start : start + batch_size]
                x_first = torch.from_numpy(first[rows])
                logits = linear_first(x_first) + mlp(x_first)
                for block, w in zip(rest, linear_rest, strict=True):
                    x = _rows(block, rows, torch)
                    logits = logits + (torch.sparse.mm(x, w) if x.is_sparse else x @ w)
                loss = torch.nn.functional.cross_entropy(logits, y[rows], weight=cw)
                optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
    finally:
        torch.random.set_rng_state(torch_state)

    def array(t: Any) -> Floats:
        out: Floats = t.detach().numpy().astype(np.float32)
        return out

    weights_all = np.vstack([array(linear_first.weight.T), *(array(w) for w in linear_rest)])
    bias = array(linear_first.bias + out_of.bias)
    head = Hidden(array(into.weight.T), array(into.bias), array(out_of.weight.T))
    return SoftmaxModel(classes, weights_all, bias, hidden=head)
