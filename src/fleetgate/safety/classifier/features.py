"""What the classifier scores: the feature rows of a text, and the shipped model that reads them.

The runtime loads a fitted model (``safety/data/classifier_head.npz``, or a check's
``model_path``) and scores `featurize` rows with it; training the model (and the training data)
is tooling, in the separate ``fleetgate-training`` distribution (``training/`` in the
repository). `FEATURE_VERSION` names the feature recipe a model is trained on, so what the
runtime computes and what the tooling trained on cannot drift apart unnoticed.

Example::

    model, _ = SoftmaxModel.load(shipped_head_path())
    proba = model.predict_proba(featurize(["how do I bake bread?"], embedder, Normalizer()))
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from fleetgate.resources.embedder import Embedder
from fleetgate.safety.classifier.embed import HASH_DIM, Floats, text_features
from fleetgate.safety.classifier.gloss import Glosser
from fleetgate.safety.classifier.model import SoftmaxModel
from fleetgate.safety.normalize import Normalizer

__all__ = [
    "FEATURE_VERSION",
    "NGRAM_WEIGHT",
    "embed_texts",
    "featurize",
    "shipped_head_path",
    "uses_gloss",
]

# "gloss+": the embedding reads Chinese through English glosses (`gloss.Glosser`), since the
# sixth shipped version; "emb+1.5ngram-v3" models (before) embed the raw text.
FEATURE_VERSION = "gloss+emb+1.5ngram-v4"
NGRAM_WEIGHT = 1.5


def uses_gloss(model: SoftmaxModel) -> bool:
    """Whether ``model`` was trained on glossed embeddings (so must be scored on them)."""
    return model.info.get("features", "").startswith("gloss+")


def shipped_head_path() -> Path:
    """The shipped model inside the installed package."""
    return Path(str(resources.files("fleetgate.safety").joinpath("data/classifier_head.npz")))


def embed_texts(texts: Sequence[str], embedder: Embedder, glosser: Glosser | None) -> Floats:
    """The sentence embeddings of ``texts`` (of their English gloss, given a ``glosser``)."""
    if glosser is not None:
        texts = [glosser.gloss(text) for text in texts]
    return np.asarray(embedder.encode(texts), dtype=np.float32)


def featurize(
    texts: Sequence[str],
    embedder: Embedder,
    normalizer: Normalizer,
    hash_dim: int = HASH_DIM,
    glosser: Glosser | None = None,
) -> Floats:
    """The classifier's input rows: the sentence embedding (of the text's English gloss, given a
    ``glosser``) next to hashed character n-grams of the text itself (``hash_dim`` buckets: a
    model saved with fewer, before 16,384 was the default, says so in its weights' shape, see
    `SoftmaxModel.hash_dim`)."""
    emb = embed_texts(texts, embedder, glosser)
    grams = text_features(texts, normalizer, dim=hash_dim)
    return np.hstack([emb, grams * NGRAM_WEIGHT]).astype(np.float32)
