"""How ``create_app`` installs the safety stage: only with a ``safety:`` section, after the
multimodal stage, with the classifier's trained weights cached under the data directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetgate.app import build_state, create_app
from fleetgate.config.loader import parse_config
from fleetgate.config.settings import Settings
from fleetgate.safety import SafetyConfig
from fleetgate.safety.runtime import localize

BASE: dict[str, Any] = {
    "models": [{"alias": "tiny", "deployments": [
        {"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:9/v1"}]}],
}  # fmt: skip


def _stages(tmp_path: Path, config: dict[str, Any]) -> list[str]:
    settings = Settings(master_key="sk-m", data_dir=tmp_path, watch_config=False)
    state = build_state(settings, parse_config(config))
    create_app(settings, state=state)
    return [type(s).__name__ for s in state.stages]


def test_no_safety_section_means_no_safety_stage(tmp_path: Path) -> None:
    assert "SafetyStage" not in _stages(tmp_path, BASE)


def test_safety_stage_runs_after_tenancy_and_multimodal(tmp_path: Path) -> None:
    stages = _stages(tmp_path, {**BASE, "safety": {}})
    assert stages == ["TenancyStage", "MultimodalStage", "SafetyStage", "SchedulingStage"]


def test_classifier_weights_are_cached_under_the_data_dir(tmp_path: Path) -> None:
    local = localize(SafetyConfig(), tmp_path)
    path = Path(local.checks["classifier"].options["cache_path"])
    assert path.is_relative_to(tmp_path)
    explicit = SafetyConfig.model_validate(
        {"checks": {"classifier": {"type": "classifier", "options": {"cache_path": "/x.npz"}}},
         "policies": {"default": {"input": ["classifier"]}}}
    )  # fmt: skip
    assert localize(explicit, tmp_path).checks["classifier"].options["cache_path"] == "/x.npz"
