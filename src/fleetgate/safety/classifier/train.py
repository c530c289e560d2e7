"""Training data, training, and the on-disk weight cache.

The shipped examples live in ``safety/data/classifier_train.jsonl`` (one
``{"text", "label"}`` per line; label ``benign`` or a harm category). A user retrains with
their own examples::

    from fleetgate.safety.classifier import load_examples, shipped_examples, train
    path = train(shipped_examples() + load_examples("mine.jsonl"), Path("my-classifier.npz"))

and points the ``classifier`` check's ``model_path`` at the file. Training data and feature
settings are fingerprinted into the file, so :func:`load_or_train` retrains only when they
change.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from fleetgate.errors import ConfigError
from fleetgate.safety.classifier.embed import HASH_DIM, Embedder, Floats, text_features
from fleetgate.safety.classifier.model import SoftmaxModel
from fleetgate.safety.normalize import Normalizer

__all__ = [
    "BENIGN",
    "Example",
    "default_cache_path",
    "featurize",
    "fingerprint",
    "load_examples",
    "load_or_train",
    "shipped_examples",
    "train",
]

BENIGN = "benign"
FEATURE_VERSION = "emb+1.5ngram-v2"
NGRAM_WEIGHT = 1.5


@dataclass(frozen=True, slots=True)
class Example:
    """One labelled training text."""

    text: str
    label: str


def _parse_lines(lines: Iterable[str], source: str) -> list[Example]:
    out: list[Example] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text = row.get("text", row.get("prompt"))
            label = row.get("label", row.get("category"))
        except (json.JSONDecodeError, AttributeError) as exc:
            raise ConfigError(f"{source}:{n}: not a JSON object: {exc}") from exc
        if not isinstance(text, str) or not isinstance(label, str):
            raise ConfigError(f"{source}:{n}: needs string 'text' and 'label'")
        out.append(Example(text, label))
    return out


def load_examples(path: str | Path) -> list[Example]:
    """Examples from a JSONL file of ``{"text", "label"}`` (or ``{"prompt", "category"}``)."""
    p = Path(path)
    return _parse_lines(p.read_text("utf-8").splitlines(), str(p))


def shipped_examples() -> list[Example]:
    """The labelled English and Chinese examples that ship with fleetgate."""
    data = resources.files("fleetgate.safety").joinpath("data/classifier_train.jsonl")
    return _parse_lines(data.read_text("utf-8").splitlines(), "classifier_train.jsonl")


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/fleetgate/safety-classifier.npz`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetgate" / "safety-classifier.npz"


def fingerprint(examples: Sequence[Example], embedder: Embedder) -> str:
    """Identifies training data + features; a cached model with another one is stale."""
    h = hashlib.sha256(f"{embedder.name}|{embedder.dim}|{FEATURE_VERSION}|{HASH_DIM}".encode())
    for ex in examples:
        h.update(json.dumps([ex.text, ex.label], ensure_ascii=False).encode())
    return h.hexdigest()


def featurize(texts: Sequence[str], embedder: Embedder, normalizer: Normalizer) -> Floats:
    """The classifier's input rows: sentence embedding next to hashed character n-grams."""
    emb = embedder.encode(texts)
    grams = text_features(texts, normalizer)
    return np.hstack([emb, grams * NGRAM_WEIGHT]).astype(np.float32)


def _benign_vs_harm_weights(labels: Sequence[str]) -> dict[str, float]:
    # Benign and harmful examples weigh half each, whatever the number of harm categories:
    # per-class balancing would give harm 8/9 of the prior and flag plain questions.
    n = len(labels)
    n_benign = sum(1 for label in labels if label == BENIGN)
    n_harm = n - n_benign
    return {
        label: (n / (2 * n_benign) if label == BENIGN else n / (2 * n_harm))
        for label in set(labels)
    }


def train(
    examples: Sequence[Example],
    path: Path,
    *,
    embedder: Embedder | None = None,
    normalizer: Normalizer | None = None,
) -> Path:
    """Train on ``examples`` and save the weights to ``path`` (blocking; seconds on a CPU)."""
    if len({ex.label for ex in examples}) < 2 or BENIGN not in {ex.label for ex in examples}:
        raise ConfigError("classifier training needs 'benign' examples and at least one harm label")
    if embedder is None:
        from fleetgate.resources.minilm import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    x = featurize([ex.text for ex in examples], embedder, normalizer or Normalizer())
    labels = [ex.label for ex in examples]
    model = SoftmaxModel.fit(x, labels, class_weight=_benign_vs_harm_weights(labels))
    model.save(path, fingerprint(examples, embedder))
    return path


def load_or_train(
    path: Path,
    examples: Sequence[Example],
    embedder: Embedder,
    normalizer: Normalizer | None = None,
) -> SoftmaxModel:
    """The cached model at ``path`` if it matches ``examples``; otherwise train and cache it."""
    want = fingerprint(examples, embedder)
    if path.exists():
        try:
            model, have = SoftmaxModel.load(path)
        except (OSError, ValueError, KeyError):
            have = ""
        if have == want:
            return model
    train(examples, path, embedder=embedder, normalizer=normalizer)
    return SoftmaxModel.load(path)[0]
