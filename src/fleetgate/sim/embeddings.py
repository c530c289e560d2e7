"""Deterministic embeddings: a signed feature-hashing of the input's token ids.

Each token id adds ``+-1`` at four positions derived from the id; the sum is L2-normalised.
The same input always gives the same vector, and texts sharing words have a positive cosine
similarity, which is enough for semantic-routing and cache tests without a model.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np

from fleetgate.errors import InvalidRequest
from fleetgate.sim.tokenizer import Tokenizer

__all__ = ["embed_ids", "embeddings_response"]

_MIXERS = (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F)


def embed_ids(ids: Sequence[int], dim: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The unit vector of ``dim`` float32s for the token ids ``ids``."""
    vec = np.zeros(dim, dtype=np.float64)
    if ids:
        arr = np.asarray(ids, dtype=np.uint64)
        for mixer in _MIXERS:
            mixed = (arr + np.uint64(1)) * np.uint64(mixer)
            idx = ((mixed >> np.uint64(7)) % np.uint64(dim)).astype(np.int64)
            sign = np.where((mixed >> np.uint64(3)) & np.uint64(1), 1.0, -1.0)
            np.add.at(vec, idx, sign)
    norm = float(np.linalg.norm(vec))
    if norm == 0.0:
        vec[0] = 1.0
        norm = 1.0
    return (vec / norm).astype(np.float32)


def _inputs(value: Any, tokenizer: Tokenizer) -> list[list[int]]:
    if isinstance(value, str):
        return [tokenizer.encode(value)]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return [tokenizer.encode(v) for v in value]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [list(value)]
        if all(isinstance(v, list) and all(isinstance(t, int) for t in v) for v in value):
            return [list(v) for v in value]
    raise InvalidRequest("'input' must be a string, a list of strings or token ids", param="input")


def embeddings_response(
    body: Any, *, model: str, default_dim: int, tokenizer: Tokenizer
) -> dict[str, Any]:
    """The ``/v1/embeddings`` answer for ``body`` (``dimensions`` and base64 honoured)."""
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    dim = body.get("dimensions") or default_dim
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= 65536:
        raise InvalidRequest("'dimensions' must be a positive integer", param="dimensions")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise InvalidRequest("'encoding_format' must be float or base64", param="encoding_format")
    items = _inputs(body.get("input"), tokenizer)
    data: list[dict[str, Any]] = []
    for i, ids in enumerate(items):
        vec = embed_ids(ids, dim)
        embedding: Any = vec.tolist()
        if fmt == "base64":
            embedding = base64.b64encode(vec.astype("<f4").tobytes()).decode()
        data.append({"object": "embedding", "index": i, "embedding": embedding})
    tokens = sum(len(ids) for ids in items)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
