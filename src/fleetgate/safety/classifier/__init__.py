"""The offline harmful-request classifier: sentence embeddings (Chinese through English glosses)
and character n-grams under a small softmax model with a hidden layer."""

from fleetgate.safety.classifier.corpus import corpus_examples
from fleetgate.safety.classifier.embed import Embedder, text_features
from fleetgate.safety.classifier.examples import BENIGN, Example, load_examples
from fleetgate.safety.classifier.model import SoftmaxModel
from fleetgate.safety.classifier.train import (
    data_sha256,
    default_cache_path,
    legacy_examples,
    load_or_train,
    shipped_examples,
    shipped_head_path,
    train,
)

__all__ = [
    "BENIGN",
    "Embedder",
    "Example",
    "SoftmaxModel",
    "corpus_examples",
    "data_sha256",
    "default_cache_path",
    "legacy_examples",
    "load_examples",
    "load_or_train",
    "shipped_examples",
    "shipped_head_path",
    "text_features",
    "train",
]
