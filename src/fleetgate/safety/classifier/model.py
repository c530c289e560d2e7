"""The classifier's head in numpy: small, dependency-free at run time, saved as one ``.npz``.

A softmax layer over all input columns, plus (models trained by
``fleetgate_training.classifier.fit_hidden``, the shipped one since its seventh version) a
hidden ReLU layer over the first block of columns, the sentence embedding, plus (since the
thirteenth version, issue #38) an optional `SecondStage`: a logistic layer over the same
columns and the first stage's harm logit, trained on plain requests and look-alikes written by
many authors, whose harm probability replaces the first stage's. Inference is numpy alone;
training needs the tooling.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Blocks",
    "Floats",
    "Hidden",
    "SecondStage",
    "SoftmaxModel",
    "column_blocks",
    "softmax",
]

Floats = npt.NDArray[np.float32]


Blocks = Sequence[Any]  # column blocks of one design matrix: numpy arrays or scipy.sparse


def column_blocks(x: Floats | Blocks, width: int | None = None) -> list[Any]:
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


def softmax(z: Floats) -> Floats:
    """Row-wise softmax of logits ``z``."""
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    out: Floats = e / e.sum(axis=1, keepdims=True)
    return out


class Hidden:
    """A hidden layer over the first ``w1.shape[0]`` input columns:
    ``relu(x[:, :e] W1 + b1) W2`` is added to the softmax layer's logits."""

    def __init__(self, w1: Floats, b1: Floats, w2: Floats) -> None:
        if w1.shape[1] != b1.shape[0] or w1.shape[1] != w2.shape[0]:
            raise ValueError(f"hidden layer shapes {w1.shape}, {b1.shape}, {w2.shape} disagree")
        self.w1, self.b1, self.w2 = w1, b1, w2

    @property
    def inputs(self) -> int:
        return int(self.w1.shape[0])

    def logits(self, first: Floats) -> Floats:
        out: Floats = np.maximum(first @ self.w1 + self.b1, 0.0) @ self.w2
        return out


class SecondStage:
    """A second opinion on harm over the same input columns: ``sigmoid(x w + b + first *
    logit(h1))``, where ``h1`` is the first stage's harm probability (1 - p(benign)).

    Its probability replaces ``h1``: the benign column becomes ``1 - h2`` and the harm classes
    are scaled to share ``h2`` as they shared ``h1`` (so the most likely category is the first
    stage's). Trained by ``fleetgate_training.classifier.second_stage``."""

    def __init__(self, weights: Floats, bias: float, first: float) -> None:
        if weights.ndim != 1:
            raise ValueError(f"second-stage weights must be one column, not {weights.shape}")
        self.weights, self.bias, self.first = weights, float(bias), float(first)

    def harm(self, blocks: Sequence[Any], first_harm: Floats) -> Floats:
        """The second stage's harm probability per row, given the first stage's."""
        h1 = np.clip(first_harm, 1e-6, 1.0 - 1e-6)
        z = self.bias + self.first * np.log(h1 / (1.0 - h1))
        start = 0
        for blk in blocks:
            width = int(blk.shape[1])
            z = z + np.asarray(blk @ self.weights[start : start + width]).reshape(-1)
            start += width
        out: Floats = (1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0)))).astype(np.float32)
        return out


class SoftmaxModel:
    """``p(class | x) = softmax(x W + b [+ relu(x_e W1 + b1) W2])``: the softmax layer trained
    with class-weighted, L2-regularised Adam (``fleetgate_training.classifier.fit_softmax``), or
    with a `Hidden` layer over the embedding columns ``x_e``
    (``fleetgate_training.classifier.fit_hidden``).

    ``info``: string facts saved with the weights (the training data's hash, the embedder, the
    threshold chosen on validation data, ...).
    """

    def __init__(
        self,
        classes: Sequence[str],
        weights: Floats,
        bias: Floats,
        info: Mapping[str, str] | None = None,
        hidden: Hidden | None = None,
        second: SecondStage | None = None,
    ) -> None:
        if second is not None and (
            second.weights.shape[0] != weights.shape[0] or "benign" not in classes
        ):
            raise ValueError("the second stage does not fit the softmax layer's shape")
        if hidden is not None and (
            hidden.inputs > weights.shape[0] or hidden.w2.shape[1] != weights.shape[1]
        ):
            raise ValueError("the hidden layer does not fit the softmax layer's shape")
        self.classes = tuple(classes)
        self.weights = weights
        self.bias = bias
        self.hidden = hidden
        self.second = second
        self.info: dict[str, str] = dict(info or {})

    def hash_dim(self, embedding_dim: int) -> int:
        """How many hashed n-gram columns follow an ``embedding_dim`` embedding in the input."""
        return int(self.weights.shape[0]) - embedding_dim

    def predict_proba(self, x: Floats | Blocks) -> Floats:
        """Class probabilities, one row per input row, columns in ``classes`` order (``x``: one
        matrix, dense or sparse, or its column blocks side by side)."""
        blocks = column_blocks(x, int(self.weights.shape[0]))
        proba = self._first_stage(blocks)
        return proba if self.second is None else self._second_opinion(blocks, proba)

    def first_stage_proba(self, x: Floats | Blocks) -> Floats:
        """`predict_proba` without the `SecondStage` (what the second stage reads)."""
        return self._first_stage(column_blocks(x, int(self.weights.shape[0])))

    def _first_stage(self, blocks: list[Any]) -> Floats:
        z, start = self.bias, 0
        for blk in blocks:
            width = int(blk.shape[1])
            z = z + blk @ self.weights[start : start + width]
            start += width
        if self.hidden is not None:
            first = blocks[0]
            if int(first.shape[1]) < self.hidden.inputs or hasattr(first, "tocsr"):
                raise ValueError("the hidden layer needs the dense embedding as the first block")
            z = z + self.hidden.logits(np.asarray(first[:, : self.hidden.inputs], np.float32))
        return softmax(np.asarray(z, dtype=np.float32))

    def _second_opinion(self, blocks: Sequence[Any], proba: Floats) -> Floats:
        assert self.second is not None
        benign = self.classes.index("benign")
        h1 = 1.0 - proba[:, benign]
        h2 = self.second.harm(blocks, h1)
        scale = np.where(h1 > 1e-12, h2 / np.maximum(h1, 1e-12), 0.0).astype(np.float32)
        out: Floats = (proba * scale[:, None]).astype(np.float32)
        out[:, benign] = 1.0 - h2
        return out

    def save(self, path: Path, fingerprint: str) -> None:
        """Write atomically (temp file + rename) so a crashed write never leaves a bad cache.

        The weights are stored as float16 (half the file; rounding moves each weight by at most
        1 part in 2,000) and read back as float32."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        hidden: dict[str, Any] = {}
        if self.hidden is not None:
            hidden = {
                "hidden_w1": self.hidden.w1.astype(np.float16),
                "hidden_b1": self.hidden.b1,
                "hidden_w2": self.hidden.w2.astype(np.float16),
            }
        if self.second is not None:
            hidden["second_w"] = self.second.weights.astype(np.float16)
            hidden["second_b"] = np.array([self.second.bias, self.second.first], np.float32)
        with tmp.open("wb") as fh:
            np.savez_compressed(
                fh,
                classes=np.array(self.classes),
                weights=self.weights.astype(np.float16),
                bias=self.bias,
                fingerprint=np.array(fingerprint),
                info=np.array(json.dumps(self.info, sort_keys=True)),
                **hidden,
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
            hidden = None
            if "hidden_w1" in data.files:
                hidden = Hidden(*(np.asarray(data[f"hidden_{k}"], dtype=np.float32)
                                  for k in ("w1", "b1", "w2")))  # fmt: skip
            second = None
            if "second_w" in data.files:
                b2, first = (float(v) for v in np.asarray(data["second_b"], np.float32))
                second = SecondStage(np.asarray(data["second_w"], np.float32), b2, first)
            info = {str(k): str(v) for k, v in info.items()}
            model = cls(classes, weights, bias, info, hidden, second)
            return model, str(data["fingerprint"])
