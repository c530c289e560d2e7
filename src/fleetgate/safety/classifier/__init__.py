"""The offline harmful-request classifier at run time: sentence embeddings (Chinese through
English glosses) and character n-grams under a small softmax model with a hidden layer, loaded
from a fitted file. Training, the training corpus and evaluation are tooling: the
``fleetgate-training`` distribution (``training/`` in the repository)."""

from fleetgate.safety.classifier.embed import text_features
from fleetgate.safety.classifier.examples import BENIGN, Example, load_examples
from fleetgate.safety.classifier.features import featurize, shipped_head_path, uses_gloss
from fleetgate.safety.classifier.model import SoftmaxModel
from fleetgate.safety.classifier.trainer import default_cache_path, load_or_train

__all__ = [
    "BENIGN",
    "Example",
    "SoftmaxModel",
    "default_cache_path",
    "featurize",
    "load_examples",
    "load_or_train",
    "shipped_head_path",
    "text_features",
    "uses_gloss",
]
