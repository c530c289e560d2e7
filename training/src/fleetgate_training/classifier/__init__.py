"""Training the safety classifier: the corpus (`corpus`), the shipped examples and training
(`train`), the softmax layer's fit (`fit_softmax`, numpy) and the hidden layer's (`fit_hidden`,
torch)."""

from fleetgate_training.classifier.corpus import corpus_examples
from fleetgate_training.classifier.fit_softmax import fit_softmax
from fleetgate_training.classifier.train import (
    benign_vs_harm_weights,
    data_sha256,
    featurize_blocks,
    fingerprint,
    legacy_examples,
    load_or_train,
    shipped_examples,
    train,
)

__all__ = [
    "benign_vs_harm_weights",
    "corpus_examples",
    "data_sha256",
    "featurize_blocks",
    "fit_softmax",
    "fingerprint",
    "legacy_examples",
    "load_or_train",
    "shipped_examples",
    "train",
]
