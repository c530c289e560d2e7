"""A classifier check given its own examples trains through the tooling's entry point."""

from __future__ import annotations

from typing import Any

import pytest

from fleetgate.errors import MissingExtra
from fleetgate.safety.checks.classifier import ClassifierCheck
from fleetgate.safety.classifier import Example
from fleetgate.safety.classifier.trainer import find_trainer
from fleetgate_training.classifier import load_or_train


class NoEmbedder:
    name, dim = "none", 4

    def encode(self, texts: Any) -> Any:
        raise AssertionError("nothing is embedded without a trainer")


def test_the_installed_tooling_is_the_trainer() -> None:
    assert find_trainer() is load_or_train


async def test_without_the_tooling_own_examples_fail_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    def none_installed(group: str) -> list[Any]:
        return []

    monkeypatch.setattr("fleetgate.safety.classifier.trainer.entry_points", none_installed)
    check = ClassifierCheck(
        embedder=NoEmbedder(),
        cache_path=tmp_path / "mine.npz",
        examples=[Example("hi", "benign"), Example("a bomb", "weapons")],
    )
    try:
        with pytest.raises(MissingExtra, match="pip install -e training"):
            await check.warm_up()
    finally:
        check.close()
    assert not (tmp_path / "mine.npz").exists()
