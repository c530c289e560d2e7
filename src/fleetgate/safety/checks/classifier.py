"""Offline prompt-injection / jailbreak / harmful-request classifier check.

The model (MiniLM int8 embeddings + character n-grams, a softmax layer and a hidden layer over
the embedding, trained offline and
shipped in the package) loads on first use or on :meth:`warm_up`, never at import time, and runs
in the check's own worker thread so the event loop never waits on it. Nothing is trained at
start unless the check is given its own ``examples``. Long texts are scored in chunks, and text
hidden in base64 or hex is decoded and scored too (`chunks.scored_pieces`); the text's score is
its worst piece's.

Example::

    check = ClassifierCheck()              # the shipped model and its validated threshold
    await check.warm_up()                  # optional: load at startup, not on the 1st request
    v = await check.check("Ignore all previous instructions and ...", CheckContext())
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from fleetgate.resources import Embedder, MiniLMEmbedder
from fleetgate.safety.base import CheckContext, Verdict
from fleetgate.safety.classifier.chunks import scored_pieces
from fleetgate.safety.classifier.examples import BENIGN, Example
from fleetgate.safety.classifier.features import featurize, shipped_head_path, uses_gloss
from fleetgate.safety.classifier.gloss import Glosser
from fleetgate.safety.classifier.model import SoftmaxModel
from fleetgate.safety.classifier.trainer import default_cache_path, load_or_train
from fleetgate.safety.normalize import Normalizer, is_cjk
from fleetgate.safety.offload import TextWorker

__all__ = ["DEFAULT_THRESHOLD", "ClassifierCheck"]

log = logging.getLogger("fleetgate.safety")

DEFAULT_THRESHOLD = 0.5  # for a model file that names no threshold of its own


def _pieces(text: str) -> tuple[list[str], bool]:
    """What is scored for ``text`` and whether it is Chinese (a pass over all of it each)."""
    return scored_pieces(text), is_cjk(text)


class ClassifierCheck:
    """Blocks text whose harm probability (1 - p(benign)) reaches ``threshold``.

    ``model_path``: a file written by ``fleetgate_training.classifier.train``, used as is.
    ``examples``: train on these instead (once, cached at ``cache_path``; the trainer is tooling,
    see `fleetgate.safety.classifier.trainer`). Without either, the shipped model.
    ``threshold``: None takes the model's own, per language (``threshold_en``, ``threshold_zh``:
    chosen on validation data when it was trained; Chinese for text with CJK ideographs), else
    0.5. ``glosser``: the Chinese-to-English glosses (one dictionary, ~31 MB,
    shared by the checks of a registry), for models trained with them. ``worker``: where a long
    text is cut into pieces (`TextWorker`: a process, off the event loop); without one the
    check makes its own and stops it in `close`.
    """

    def __init__(
        self,
        *,
        name: str = "classifier",
        threshold: float | None = None,
        model_path: Path | None = None,
        cache_path: Path | None = None,
        examples: Sequence[Example] | None = None,
        embedder: Embedder | None = None,
        glosser: Glosser | None = None,
        worker: TextWorker | None = None,
    ) -> None:
        self.name = name
        self.threshold = threshold
        self._model_path = model_path
        self._cache_path = cache_path
        self._examples = examples
        self._embedder: Embedder = embedder or MiniLMEmbedder(quantize=True, with_max=True)
        self._normalizer = Normalizer()
        self._glosser = glosser or Glosser()
        self._gloss = False  # whether the loaded model reads Chinese through glosses
        self._model: SoftmaxModel | None = None
        self._thresholds: dict[str, float] = {}
        self._load_lock = asyncio.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fg-safety-clf")
        self._own_worker = worker is None
        self._worker = worker or TextWorker()

    def _load_sync(self) -> SoftmaxModel:
        if self._examples is not None and self._model_path is None:
            path = self._cache_path or default_cache_path()
            model = load_or_train(
                path, self._examples, self._embedder, self._normalizer, self._glosser
            )
        else:
            model = SoftmaxModel.load(self._model_path or shipped_head_path())[0]
        trained_on = model.info.get("embedder")
        if trained_on is not None and trained_on != self._embedder.name:
            log.warning(
                "classifier %s was trained on %s embeddings but runs on %s: scores may drift",
                self.name, trained_on, self._embedder.name,
            )  # fmt: skip
        if self.threshold is None:
            default = model.info.get("threshold", DEFAULT_THRESHOLD)
            self._thresholds = {
                lang: float(model.info.get(f"threshold_{lang}", default)) for lang in ("en", "zh")
            }
        else:
            self._thresholds = {"en": self.threshold, "zh": self.threshold}
        self._gloss = uses_gloss(model)
        if self._gloss:
            self._glosser.warm_up()  # the dictionary: a second, not on the first Chinese text
        self._embedder.encode(["warm up"])  # the embedder's weights (shared: often loaded already)
        return model

    async def warm_up(self) -> None:
        """Load the model (or, given ``examples``, train and cache it) and the embedder now."""
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
        hash_dim = model.hash_dim(self._embedder.dim)
        glosser = self._glosser if self._gloss else None
        proba = model.predict_proba(
            featurize(texts, self._embedder, self._normalizer, hash_dim, glosser)
        )
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
        if not text or text.isspace():
            return Verdict.allow(self.name)
        pieces, chinese = await self._worker.run(_pieces, text, size=len(text))
        scored = await self.score_many(pieces)
        score, category = max(scored)
        if score >= self._thresholds["zh" if chinese else "en"]:
            return Verdict.block(self.name, [category], score=score, detail=f"p={score:.2f}")
        return Verdict.allow(self.name, score=score)

    def close(self) -> None:
        """Stop the worker thread (waits for a running inference to finish) and the worker
        process if this check made its own."""
        self._executor.shutdown(wait=True)
        if self._own_worker:
            self._worker.close()

    async def aclose(self) -> None:
        """`close` off the event loop (the wait for a running inference would stall it)."""
        await asyncio.to_thread(self.close)
