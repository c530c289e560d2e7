"""Training a classifier check on its own ``examples``: found in the tooling, not shipped here.

The runtime ships fitted models only. A `ClassifierCheck` given ``examples`` in code is trained
(once, cached at ``cache_path``) by the trainer that the ``fleetgate-training`` distribution
(``training/`` in the repository, ``pip install -e training``) registers under the entry point
group ``fleetgate.classifier_trainers``, as simonw/llm finds its plug-ins: the runtime imports
no tooling module by name. Without it, such a check fails to load with `MissingExtra` naming
the install command; the shipped model and ``model_path`` files need no trainer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol, cast

from fleetgate.errors import MissingExtra
from fleetgate.resources.embedder import Embedder
from fleetgate.safety.classifier.examples import Example
from fleetgate.safety.classifier.gloss import Glosser
from fleetgate.safety.classifier.model import SoftmaxModel
from fleetgate.safety.normalize import Normalizer

__all__ = ["TRAINERS", "Trainer", "default_cache_path", "find_trainer", "load_or_train"]

TRAINERS = "fleetgate.classifier_trainers"  # the entry point group; the tooling's is "default"
INSTALL = "pip install -e training (the fleetgate-training distribution in fleetgate's repository)"


class Trainer(Protocol):
    """The model cached at ``path`` if it was trained on ``examples`` with these features;
    otherwise a model trained on them now (blocking), written to ``path`` first."""

    def __call__(
        self,
        path: Path,
        examples: Sequence[Example],
        embedder: Embedder,
        normalizer: Normalizer | None = None,
        glosser: Glosser | None = None,
    ) -> SoftmaxModel: ...


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/fleetgate/safety-classifier.npz`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetgate" / "safety-classifier.npz"


def find_trainer() -> Trainer:
    """The installed tooling's trainer; `MissingExtra` saying how to install it if none is."""
    found = sorted(entry_points(group=TRAINERS), key=lambda ep: ep.name != "default")
    if not found:
        raise MissingExtra(
            f"training a classifier check on its own examples needs fleetgate-training: {INSTALL}",
            extra="training",
        )
    return cast(Trainer, found[0].load())


def load_or_train(
    path: Path,
    examples: Sequence[Example],
    embedder: Embedder,
    normalizer: Normalizer | None = None,
    glosser: Glosser | None = None,
) -> SoftmaxModel:
    """`find_trainer`'s model for ``examples``, cached at ``path``."""
    return find_trainer()(path, examples, embedder, normalizer, glosser)
