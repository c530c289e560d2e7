"""Offline prompt-injection / jailbreak / harmful-request classifier check.

The model (MiniLM embeddings + a softmax layer) loads on first use or on :meth:`warm_up`, never at
import time, and runs in the check's own worker thread so the event loop never waits on it.
Long texts are scored in chunks; the text's score is its worst chunk's.

Example::

    check = ClassifierCheck(threshold=0.5)
    await check.warm_up()                  # optional: load/train at startup, not on 1st request
    v = await check.check("Ignore all previous instructions and ...", CheckContext())
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from fleetgate.resources.minilm import MiniLMEmbedder
from fleetgate.safety.base import CheckContext, Verdict
from fleetgate.safety.classifier.embed import Embedder
from fleetgate.safety.classifier.model import SoftmaxModel
from fleetgate.safety.classifier.train import (
    BENIGN,
    Example,
    default_cache_path,
    featurize,
    load_or_train,
    shipped_examples,
)
from fleetgate.safety.normalize import Normalizer

__all__ = ["ClassifierCheck", "split_chunks"]

_SENTENCE_END = re.compile(r"(?<=[.!?;。！？；\n])\s*")


def split_chunks(text: str, size: int = 240, whole: int = 600, limit: int = 48) -> list[str]:
    """The pieces a text is scored on: the whole text (up to ``whole`` characters) and each of its
    sentences (sliced at ``size``), so one harmful sentence in a long benign text is not diluted.
    Past ``limit`` pieces the first and last halves are kept."""
    sentences = [s for s in _SENTENCE_END.split(text) if s.strip()]
    if len(text) <= size and len(sentences) <= 1:
        return [text]
    chunks: list[str] = [text] if len(text) <= whole else []
    for sentence in sentences:
        chunks.extend(sentence[i : i + size] for i in range(0, len(sentence), size))
    if len(chunks) > limit:  # keep the head and tail of a very long text
        chunks = chunks[: limit // 2] + chunks[-(limit - limit // 2) :]
    return chunks


class ClassifierCheck:
    """Blocks text whose harm probability (1 - p(benign)) reaches ``threshold``.

    ``model_path``: a file written by :func:`~fleetgate.safety.classifier.train`, used as is.
    Without it the shipped examples are trained once and cached at ``cache_path``.
    """

    def __init__(
        self,
        *,
        name: str = "classifier",
        threshold: float = 0.5,
        model_path: Path | None = None,
        cache_path: Path | None = None,
        examples: Sequence[Example] | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.name = name
        self.threshold = threshold
        self._model_path = model_path
        self._cache_path = cache_path
        self._examples = examples
        self._embedder: Embedder = embedder or MiniLMEmbedder()
        self._normalizer = Normalizer()
        self._model: SoftmaxModel | None = None
        self._load_lock = asyncio.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fg-safety-clf")

    def _load_sync(self) -> SoftmaxModel:
        if self._model_path is not None:
            return SoftmaxModel.load(self._model_path)[0]
        examples = self._examples if self._examples is not None else shipped_examples()
        path = self._cache_path or default_cache_path()
        return load_or_train(path, examples, self._embedder, self._normalizer)

    async def warm_up(self) -> None:
        """Load (or train and cache) the model and the embedder now."""
        await self._ensure_model()

    async def _ensure_model(self) -> SoftmaxModel:
        if self._model is not None:
            return self._model
        async with self._load_lock:
            if self._model is None:
                loop = asyncio.get_running_loop()
                self._model = await loop.run_in_executor(self._executor, self._load_sync)
        return self._model

    def _scores_sync(self, model: SoftmaxModel, texts: Sequence[str]) -> list[tuple[float, str]]:
        proba = model.predict_proba(featurize(texts, self._embedder, self._normalizer))
        benign = model.classes.index(BENIGN)
        harm = proba.copy()
        harm[:, benign] = -1.0
        top = np.argmax(harm, axis=1)
        return [
            (float(1.0 - p[benign]), model.classes[int(t)]) for p, t in zip(proba, top, strict=True)
        ]

    async def score_many(self, texts: Sequence[str]) -> list[tuple[float, str]]:
        """``(harm probability, most likely harm category)`` per text, batched in one call."""
        model = await self._ensure_model()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._scores_sync, model, list(texts))

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        if not text.strip():
            return Verdict.allow(self.name)
        scored = await self.score_many(split_chunks(text))
        score, category = max(scored)
        if score >= self.threshold:
            return Verdict.block(self.name, [category], score=score, detail=f"p={score:.2f}")
        return Verdict.allow(self.name, score=score)

    def close(self) -> None:
        """Stop the worker thread (waits for a running inference to finish)."""
        self._executor.shutdown(wait=True)

    async def aclose(self) -> None:
        """`close` off the event loop (the wait for a running inference would stall it)."""
        await asyncio.to_thread(self.close)
