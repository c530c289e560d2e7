"""The offline harmful-request classifier: sentence embeddings + a small softmax model."""

from fleetgate.safety.classifier.embed import Embedder, text_features
from fleetgate.safety.classifier.model import SoftmaxModel
from fleetgate.safety.classifier.train import (
    BENIGN,
    Example,
    default_cache_path,
    load_examples,
    load_or_train,
    shipped_examples,
    train,
)

__all__ = [
    "BENIGN",
    "Embedder",
    "Example",
    "SoftmaxModel",
    "default_cache_path",
    "load_examples",
    "load_or_train",
    "shipped_examples",
    "text_features",
    "train",
]
