"""Training data, training and the on-disk weight cache of the safety classifier (tooling).

The shipped model (``fleetgate/safety/data/classifier_head.npz`` in the runtime package: a
softmax layer, and a hidden layer over the embedding (`fit_hidden`), over MiniLM int8
embeddings and character n-grams, a few hundred KB) is trained offline by
``bench/safety/train_classifier.py`` on :func:`shipped_examples` and only loaded at run time.
The file records the hash of its training data (:func:`data_sha256`); a test checks that it
matches the data in this distribution.

A user retrains with their own examples::

    from fleetgate.safety.classifier import load_examples
    from fleetgate_training.classifier import shipped_examples, train
    path = train(shipped_examples() + load_examples("mine.jsonl"), Path("my-classifier.npz"))

and points the ``classifier`` check's ``model_path`` at the file. Training data and feature
settings are fingerprinted into the file, so :func:`load_or_train` (the trainer a check given
``examples`` finds through the ``fleetgate.classifier_trainers`` entry point) retrains only
when they change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from fleetgate.errors import ConfigError
from fleetgate.resources.embedder import Embedder
from fleetgate.safety.classifier.embed import HASH_DIM, Floats, text_features_sparse
from fleetgate.safety.classifier.examples import BENIGN, Example, parse_lines
from fleetgate.safety.classifier.features import FEATURE_VERSION, NGRAM_WEIGHT, embed_texts
from fleetgate.safety.classifier.gloss import Glosser
from fleetgate.safety.classifier.model import SoftmaxModel
from fleetgate.safety.normalize import Normalizer
from fleetgate_training.classifier.corpus import corpus_examples
from fleetgate_training.classifier.fit_softmax import fit_softmax
from fleetgate_training.classifier.hazards import hazard_examples

__all__ = [
    "HAZARD_REPEAT",
    "benign_vs_harm_weights",
    "data_sha256",
    "featurize_blocks",
    "fingerprint",
    "legacy_examples",
    "load_or_train",
    "shipped_examples",
    "train",
]


# how many times each training author's prompt of the hazard set is in the shipped examples
# (issue #38). 0: the shipped model (the twelfth) was trained without it; the versions tried
# with it took 10 (about 1,000 plain requests beside some 150,000 framed corpus texts) and none
# was kept (docs/safety.md, "The hazard set"). A model trained with another value ships with it.
# Since the thirteenth version the hazard set's training authors train the second stage instead
# (`fleetgate_training.classifier.second_stage`), over this first stage's verdict.
HAZARD_REPEAT = 0


def legacy_examples() -> list[Example]:
    """The first hand-written examples (``fleetgate_training/data/classifier_train.jsonl``)."""
    data = resources.files("fleetgate_training").joinpath("data/classifier_train.jsonl")
    return parse_lines(data.read_text("utf-8").splitlines(), "classifier_train.jsonl")


def shipped_examples() -> list[Example]:
    """Everything the shipped model is trained on: the hand-written examples, the corpus
    (`fleetgate_training.classifier.corpus`), English and Chinese, and the hazard set's
    training authors (`fleetgate_training.classifier.hazards`: never its held-out ones)."""
    hazards = hazard_examples("train", repeat=HAZARD_REPEAT)
    return legacy_examples() + corpus_examples("all") + hazards


def data_sha256(examples: Sequence[Example]) -> str:
    """Identifies a list of training examples (order included)."""
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps([ex.text, ex.label], ensure_ascii=False).encode())
    return h.hexdigest()


def fingerprint(examples: Sequence[Example], embedder: Embedder, hidden: int = 256) -> str:
    """Identifies training data, features and head (``hidden`` units, as `train`); a cached
    model with another one is stale."""
    head = f"{embedder.name}|{embedder.dim}|{FEATURE_VERSION}|{HASH_DIM}|{data_sha256(examples)}"
    return hashlib.sha256(f"{head}|hidden{hidden}".encode()).hexdigest()


def featurize_blocks(
    texts: Sequence[str],
    embedder: Embedder,
    normalizer: Normalizer,
    hash_dim: int = HASH_DIM,
    glosser: Glosser | None = None,
) -> tuple[Floats, Any]:
    """`featurize`'s columns (`fleetgate.safety.classifier.features`) as two blocks for
    `SoftmaxModel` (training, batch scoring): the embeddings (dense) and the weighted n-grams
    (``scipy.sparse``, which ``ml`` installs)."""
    grams = text_features_sparse(texts, normalizer, dim=hash_dim) * np.float32(NGRAM_WEIGHT)
    return embed_texts(texts, embedder, glosser), grams.tocsr()


def benign_vs_harm_weights(labels: Sequence[str], benign_share: float = 0.5) -> dict[str, float]:
    """Class weights giving benign examples ``benign_share`` of the total weight and the harm
    categories the rest, whatever the number of harm categories (per-class balancing would give
    harm 8/9 of the prior and flag plain questions)."""
    n = len(labels)
    n_benign = sum(1 for label in labels if label == BENIGN)
    n_harm = n - n_benign
    return {
        label: (n * benign_share / n_benign if label == BENIGN else n * (1 - benign_share) / n_harm)
        for label in set(labels)
    }


def train(
    examples: Sequence[Example],
    path: Path,
    *,
    embedder: Embedder | None = None,
    normalizer: Normalizer | None = None,
    glosser: Glosser | None = None,
    info: Mapping[str, str] | None = None,
    l2: float = 1e-4,
    epochs: int | None = None,
    hidden: int = 256,
) -> Path:
    """Train on ``examples`` and save the weights to ``path`` (blocking; seconds to minutes on a
    CPU). ``info`` is saved with the weights (e.g. a ``threshold``). Chinese is embedded through
    ``glosser`` (a new `Glosser` when None). ``hidden``: the units of the hidden layer over the
    embedding (`fit_hidden`, torch; ``epochs`` default 16 passes over minibatches), or 0 for
    the softmax layer alone (`fit_softmax`, numpy; default 400 full-batch steps). ``l2``
    is the weight decay of either."""
    if len({ex.label for ex in examples}) < 2 or BENIGN not in {ex.label for ex in examples}:
        raise ConfigError("classifier training needs 'benign' examples and at least one harm label")
    if embedder is None:
        from fleetgate.resources.minilm import MiniLMEmbedder

        embedder = MiniLMEmbedder(quantize=True, with_max=True)
    x = featurize_blocks(
        [ex.text for ex in examples],
        embedder,
        normalizer or Normalizer(),
        glosser=glosser or Glosser(),
    )
    labels = [ex.label for ex in examples]
    weights = benign_vs_harm_weights(labels)
    if hidden > 0:
        from fleetgate_training.classifier.fit_hidden import fit_hidden

        model = fit_hidden(
            x, labels, class_weight=weights, hidden=hidden, epochs=epochs or 16, weight_decay=l2
        )
    else:
        model = fit_softmax(x, labels, class_weight=weights, l2=l2, epochs=epochs or 400)
    model.info = {
        "embedder": embedder.name,
        "features": f"{FEATURE_VERSION}/{HASH_DIM}",
        "head": f"softmax+hidden{hidden}" if hidden > 0 else "softmax",
        "data_sha256": data_sha256(examples),
        "examples": str(len(examples)),
        **(info or {}),
    }
    model.save(path, fingerprint(examples, embedder, hidden))
    return path


def load_or_train(
    path: Path,
    examples: Sequence[Example],
    embedder: Embedder,
    normalizer: Normalizer | None = None,
    glosser: Glosser | None = None,
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
    train(examples, path, embedder=embedder, normalizer=normalizer, glosser=glosser)
    return SoftmaxModel.load(path)[0]
