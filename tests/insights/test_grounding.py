"""Groundedness on a labelled set written for this test (12 documents, each with 2 answers
consistent with it and 2 contradicting it: changed numbers, flipped negations, other names,
claims it does not make): AUC, and precision/recall of the default threshold for flagging the
contradicting ones; against the embedding's similarity alone as the baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetgate.insights.config import InsightsConfig
from fleetgate.insights.grounding import GroundednessScorer, sentences
from fleetgate.resources.minilm import MiniLMEmbedder

DATA = Path(__file__).parent / "data" / "grounding_labelled.json"


def _auc(pos: list[float], neg: list[float]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def _scores(scorer: GroundednessScorer) -> tuple[list[float], list[float]]:
    items = json.loads(DATA.read_text("utf-8"))
    pos = [scorer.score(a, [it["doc"]]) for it in items for a in it["consistent"]]
    neg = [scorer.score(a, [it["doc"]]) for it in items for a in it["contradicting"]]
    return pos, neg


@pytest.mark.slow
def test_contradicting_answers_score_lower_than_consistent_ones() -> None:
    embedder = MiniLMEmbedder()
    pos, neg = _scores(GroundednessScorer(embedder))
    assert len(pos) == len(neg) == 24
    auc = _auc(pos, neg)
    threshold = InsightsConfig().grounding_threshold
    flagged_bad = sum(n < threshold for n in neg)
    flagged_good = sum(p < threshold for p in pos)
    precision = flagged_bad / (flagged_bad + flagged_good)
    recall = flagged_bad / len(neg)
    base_pos, base_neg = _scores(GroundednessScorer(embedder, penalties=False))
    baseline = _auc(base_pos, base_neg)
    print(f"AUC {auc:.3f} (embedding alone {baseline:.3f}); threshold {threshold}: "
          f"precision {precision:.2f}, recall {recall:.2f}")  # fmt: skip
    assert auc >= 0.9 and auc > baseline
    assert precision >= 0.85 and recall >= 0.7


class _Unit:
    """Every text the same vector: support is 1, only the penalties decide."""

    name, dim = "unit", 2

    def load(self) -> None:
        return None

    def encode(self, texts: list[str]) -> object:
        import numpy as np

        return np.tile(np.array([1.0, 0.0], dtype=np.float32), (len(texts), 1))


def test_numbers_names_and_negations_missing_from_the_documents_lower_the_score() -> None:
    scorer = GroundednessScorer(_Unit())  # type: ignore[arg-type]
    doc = ["The warranty lasts 2 years in Germany. Returns are accepted."]
    assert scorer.score("The warranty lasts 2 years in Germany.", doc) == 1.0
    assert scorer.score("The warranty lasts 5 years in Germany.", doc) == pytest.approx(0.75)
    assert scorer.score("The warranty lasts 2 years in France.", doc) == pytest.approx(0.75)
    assert scorer.score("Returns are not accepted at all.", doc) == pytest.approx(0.75)
    assert scorer.score("ok", doc) == 1.0  # no claim of three words
    assert scorer.score("The warranty lasts 2 years.", []) == 0.0  # nothing retrieved
    assert sentences("One two three. Four five six!\nSeven eight nine") == [
        "One two three.", "Four five six!", "Seven eight nine"]  # fmt: skip
