"""``multimodal.inputs``: one typed budget for every input, older limit fields still honoured."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from tests.resources.support import resources

from fleetgate.config.settings import Settings
from fleetgate.multimodal.budgets import InputBudget
from fleetgate.multimodal.config import MultimodalConfig
from fleetgate.multimodal.runtime import MultimodalRuntime
from fleetgate.resources import Resources

__all__ = ["resources"]


def test_defaults_bound_every_input() -> None:
    budget = InputBudget()
    assert budget.upload_bytes >= budget.audio_bytes
    limits = budget.audio_limits()
    # The 93 KB FLAC of the report: 192 kHz x 8 channels x 60 s.
    assert 192_000 * 8 * 60 > limits.max_samples
    assert limits.max_rate >= 48_000 and limits.max_channels >= 2
    with pytest.raises(ValidationError):
        InputBudget(upload_parts=0)
    with pytest.raises(ValidationError):
        MultimodalConfig.model_validate({"inputs": {"no_such_limit": 1}})


def test_older_fields_fill_the_budget_unless_it_is_set() -> None:
    cfg = MultimodalConfig.model_validate(
        {"asr": {"max_bytes": 1000, "max_seconds": 30}, "images": {"max_decode_pixels": 500}}
    )
    assert (cfg.inputs.audio_bytes, cfg.inputs.audio_seconds) == (1000, 30)
    assert cfg.inputs.image_pixels == 500
    both = MultimodalConfig.model_validate(
        {"asr": {"max_bytes": 1000}, "inputs": {"audio_bytes": 2000}}
    )
    assert both.inputs.audio_bytes == 2000


def test_the_runtime_takes_its_limits_from_the_budget(tmp_path: Path, resources: Resources) -> None:
    cfg = MultimodalConfig.model_validate(
        {"inputs": {"audio_seconds": 12, "audio_samples": 1000, "image_pixels": 777}}
    )
    runtime = MultimodalRuntime(
        cfg, Settings(master_key="sk-x", data_dir=tmp_path), resources=resources
    )
    assert runtime.processor.params.max_decode_pixels == 777
    limits = runtime.transcriber.limits
    assert (limits.max_seconds, limits.max_samples) == (12, 1000)
