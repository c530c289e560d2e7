from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.config.loader import load_config, parse_config
from fleetgate.errors import ConfigError

ISSUE_SHAPE = """
models:
  - alias: fast-small
    strategy: least-load        # weighted (default) | least-load | latency | cost
    fallbacks: [smart]
    deployments:
      - provider: openai        # openai | azure | anthropic
        model: tiny             # the upstream's model name
        api_base: http://127.0.0.1:8001/v1
        api_key: ${VLLM_KEY}    # environment reference
        weight: 1
        version: v1
        context_window: 8192
        price: {input_per_mtok: 0.10, output_per_mtok: 0.40}
        tags: [local]
  - alias: smart
    deployments:
      - {provider: anthropic, model: claude, api_base: "https://api.anthropic.com"}
"""


def test_the_documented_shape_loads(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(ISSUE_SHAPE)
    cfg = load_config(path, env={"VLLM_KEY": "secret"})
    dep = cfg.models[0].deployments[0]
    assert dep.api_key == "secret"
    assert dep.price.output_per_mtok == 0.40
    assert cfg.models[0].local_only and not cfg.models[1].local_only
    assert cfg.models[0].fallbacks == ("smart",)


def test_missing_env_var_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(ISSUE_SHAPE)
    with pytest.raises(ConfigError, match=r"models\[0\]\.deployments\[0\]\.api_key.*VLLM_KEY"):
        load_config(path, env={})


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"models": [{"alias": "a", "deployments": [{"model": "m", "api_base": "ftp://x"}]}]},
         r"models\[0\]\(alias=a\)\.deployments\[0\]\.api_base"),
        ({"models": [{"alias": "a", "deployments": [{"model": "m", "api_base": "http://x",
                                                     "weight": -1}]}]},
         r"deployments\[0\]\.weight"),
        ({"models": [{"alias": "a", "deployments": []}]}, r"models\[0\]\(alias=a\)\.deployments"),
        ({"models": [{"alias": "a", "deployments": [{"model": "m", "api_base": "http://x",
                                                     "colour": "red"}]}]},
         r"deployments\[0\]\.colour"),
        ({"models": [{"alias": "a", "fallbacks": ["b"],
                      "deployments": [{"model": "m", "api_base": "http://x"}]}]},
         r"fallback 'b' is not a configured alias"),
        ({"models": [{"alias": "a", "deployments": [{"provider": "azure", "model": "m",
                                                     "api_base": "http://x"}]}]},
         r"api_version"),
        ({"nothing": 1}, r"models"),
    ],
)  # fmt: skip
def test_invalid_configs_name_the_field(doc: dict[str, object], where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        parse_config(doc, env={})


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("models: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "absent.yaml")
