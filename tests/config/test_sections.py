"""Feature sections (`fleetgate.config.sections`): declared by each feature, validated when the
config is loaded or reloaded, and `fleetgate.config` imports no feature package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.app import SECTIONS, build_state, create_app
from fleetgate.config.loader import load_config, parse_config
from fleetgate.config.schema import GatewayConfig
from fleetgate.config.settings import Settings
from fleetgate.errors import ConfigError
from fleetgate.multimodal.config import MULTIMODAL_SECTION, MultimodalConfig
from fleetgate.routing.semantic_config import SEMANTIC_SECTION
from fleetgate.safety.config import SAFETY_SECTION
from tests.test_architecture_imports import import_graph, top_level

GROUND = {"config", "errors"}  # what fleetgate.config may import from the package


def _doc(**sections: Any) -> dict[str, Any]:
    model = {"alias": "m", "deployments": [{"model": "m", "api_base": "http://u"}]}
    return {"models": [model], **sections}


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"safety": {"policies": {"default": {"inputs": []}}}},
         "safety.policies.default.inputs: Extra inputs are not permitted"),
        ({"batches": {"max_line_attempts": 0}}, "batches.max_line_attempts: Input should be"),
        ({"saftey": {}}, "saftey: Extra inputs are not permitted"),
        ({"semantic": {"intents": {"code": {"alias": "nope"}}, "default_intent": None}},
         "semantic.intents.code.alias 'nope' is not a configured alias"),
    ],
)  # fmt: skip
def test_a_bad_or_unknown_section_is_refused_at_load_naming_the_field(
    sections: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config(_doc(**sections), env={}, sections=SECTIONS)


def test_a_bad_per_alias_section_names_its_alias() -> None:
    doc = _doc()
    doc["models"][0]["cache"] = {"exact": True, "ttl_s": -1}
    with pytest.raises(ConfigError, match=r"models\[0\]\(alias=m\)\.cache\.ttl_s"):
        parse_config(doc, env={}, sections=SECTIONS)
    doc["models"][0]["cahce"] = {}
    with pytest.raises(ConfigError, match=r"models\[0\]\(alias=m\)\.cahce: Extra inputs"):
        parse_config(doc, env={}, sections=SECTIONS)


def test_every_problem_is_named_at_once() -> None:
    doc = _doc(safety={"enabled": "maybe"}, mcp={"path": "no-slash"}, typo=1,
               semantic={"alias": "auto"})  # fmt: skip
    with pytest.raises(ConfigError) as err:
        parse_config(doc, env={}, sections=SECTIONS)
    for where in ("safety.enabled", "mcp.path", "typo", "semantic.intents"):
        assert where in err.value.message


def test_a_section_reads_as_its_model_with_defaults_or_none() -> None:
    config = parse_config(_doc(safety={"policies": {"default": {}}}), env={}, sections=SECTIONS)
    safety = SAFETY_SECTION.of(config)
    assert safety is not None and safety.default_policy == "default"
    assert SEMANTIC_SECTION.of(config) is None  # optional: absent, the router is off
    assert MULTIMODAL_SECTION.of(config).enabled  # absent: its defaults
    # shown (GET /admin/config, reload diffs) at its own key, defaults included
    shown = config.model_dump(mode="json")
    assert "sections" not in shown and shown["safety"]["default_policy"] == "default"


def test_a_config_built_in_code_is_checked_when_the_gateway_is_built(tmp_path: Path) -> None:
    config = GatewayConfig.model_validate(_doc(scheduling={"default_band": "urgent"}))
    with pytest.raises(ConfigError, match="scheduling.default_band"):
        build_state(Settings(data_dir=tmp_path), config)


def test_a_reload_with_a_bad_section_is_refused_and_the_old_config_kept(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_doc(releases={"retention": 3})))
    settings = Settings(master_key="sk-m", config_path=path, data_dir=tmp_path, watch_config=False)
    load_config(path, sections=SECTIONS)  # valid
    app = create_app(settings)
    from fleetgate.api.state import GATEWAY

    tables = app[GATEWAY].tables
    path.write_text(yaml.safe_dump(_doc(releases={"retention": "all"})))
    with pytest.raises(ConfigError, match="releases.retention"):
        tables.reload()
    assert tables.table.config.model_dump(mode="json")["releases"]["retention"] == 3


def test_config_imports_no_feature_package() -> None:
    graph = import_graph()
    above = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if top_level(module) == "config"
        for target in targets
        if top_level(target) not in GROUND
    )
    assert not above, above


def test_a_copy_with_another_section_leaves_the_original_as_it_was() -> None:
    config = parse_config(_doc(), env={}, sections=SECTIONS)
    off = config.model_copy(update={"multimodal": MultimodalConfig(enabled=False)})
    assert not MULTIMODAL_SECTION.of(off).enabled
    assert MULTIMODAL_SECTION.of(config).enabled
    assert config.model_dump(mode="json")["multimodal"]["enabled"] is True
