"""What every feature that embeds text needs of an embedder: one protocol for all of them.

The semantic router, the response cache, document retrieval and the safety classifier each
take an `Embedder`; the gateway's are `fleetgate.resources.minilm.MiniLMEmbedder` (and the
router's `fleetgate.routing.semantic_encoder.MiniLMEncoder`) over the process's one MiniLM,
tests pass small stand-ins.

Example::

    def nearest(embedder: Embedder, query: str, rows: Vectors) -> int:
        return int(np.argmax(rows @ embedder.encode([query])[0]))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["Embedder", "Vectors"]

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Texts to fixed-size, L2-normalised float32 rows. Blocking: call it from a worker thread."""

    @property
    def name(self) -> str:
        """The model and its numerics: vectors made under one name are comparable (and may be
        cached under it); different names give different vectors."""
        ...

    @property
    def dim(self) -> int:
        """The width of a row."""
        ...

    def load(self) -> None:
        """Read the weights now (seconds; idempotent). `encode` loads on first use anyway; a
        feature calls this at startup, in its worker thread, to keep that off a request."""
        ...

    def encode(self, texts: Sequence[str]) -> Vectors:
        """``(len(texts), dim)`` float32, each row of unit length."""
        ...
