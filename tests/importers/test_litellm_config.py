"""`fleetgate import litellm-config`: LiteLLM's documented example configs, written out here
from the published field list (docs.litellm.ai/docs/proxy/configs and config_settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient

from fleetgate.cache.config import CACHE_SECTION
from fleetgate.cli.main import main
from fleetgate.config.loader import load_config
from fleetgate.config.schema import GatewayConfig
from fleetgate.errors import ConfigError
from fleetgate.importers.litellm_config import convert_litellm_config
from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream

# The quick-start shape: one alias load-balanced over two Azure deployments, an OpenAI model,
# a vLLM server, router and module settings, a master key and a database URL.
QUICKSTART = """
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: azure/gpt-4o-eu
      api_base: https://my-endpoint-europe.openai.azure.com/
      api_key: os.environ/AZURE_API_KEY_EU
      api_version: "2024-10-21"
      rpm: 6
    model_info:
      id: gpt-4o-eu
  - model_name: gpt-4o
    litellm_params:
      model: azure/gpt-4o-ca
      api_base: https://my-endpoint-canada.openai.azure.com/
      api_key: os.environ/AZURE_API_KEY_CA
      api_version: "2024-10-21"
      rpm: 6
      timeout: 30
      stream_timeout: 10
  - model_name: gpt-3.5-turbo
    litellm_params:
      model: openai/gpt-3.5-turbo
      api_key: os.environ/OPENAI_API_KEY
      tpm: 100000
      max_retries: 3
      input_cost_per_token: 0.0000005
      output_cost_per_token: 0.0000015
  - model_name: vllm-models
    litellm_params:
      model: openai/facebook/opt-125m
      api_base: http://0.0.0.0:4000/v1
      api_key: none
      rpm: 1440
    model_info:
      version: 2
  - model_name: bedrock-claude
    litellm_params:
      model: bedrock/anthropic.claude-3-sonnet-20240229-v1:0
      aws_region_name: us-east-1
litellm_settings:
  drop_params: true
  set_verbose: true
  success_callback: ["langfuse"]
  num_retries: 3
  request_timeout: 10
  fallbacks: [{"gpt-3.5-turbo": ["gpt-4o"]}]
  context_window_fallbacks: [{"gpt-3.5-turbo": ["gpt-4o"]}]
  cache: true
  cache_params:
    type: redis
    ttl: 600
router_settings:
  routing_strategy: usage-based-routing-v2
  redis_host: os.environ/REDIS_HOST
  redis_port: 6379
  num_retries: 2
  timeout: 30
  allowed_fails: 3
  cooldown_time: 30
  model_group_alias: {"gpt-4": "gpt-4o"}
general_settings:
  master_key: sk-1234
  database_url: os.environ/DATABASE_URL
  alerting: ["slack"]
environment_variables:
  REDIS_HOST: localhost
"""

# The load-balancing example: a model group over several deployments with weights, least-busy
# routing, default fallbacks, a vLLM-hosted model and an Anthropic model.
LOAD_BALANCER = """
model_list:
  - model_name: llama-3
    litellm_params:
      model: hosted_vllm/meta-llama/Llama-3-8B-Instruct
      api_base: http://10.0.0.1:8000/v1
      weight: 3
  - model_name: llama-3
    litellm_params:
      model: hosted_vllm/meta-llama/Llama-3-8B-Instruct
      api_base: http://10.0.0.2:8000/v1
      weight: 1
  - model_name: claude-3-5-sonnet
    litellm_params:
      model: anthropic/claude-3-5-sonnet-20240620
      api_key: os.environ/ANTHROPIC_API_KEY
  - model_name: "openai/*"
    litellm_params:
      model: "openai/*"
      api_key: os.environ/OPENAI_API_KEY
router_settings:
  routing_strategy: least-busy
  default_fallbacks: ["claude-3-5-sonnet"]
  retry_after: 0.5
"""


def _convert(text: str) -> Any:
    return convert_litellm_config(yaml.safe_load(text))


def test_quickstart_aliases_deployments_and_env_references() -> None:
    result = _convert(QUICKSTART)
    models = {m["alias"]: m for m in result.config["models"]}
    assert set(models) == {"gpt-4o", "gpt-3.5-turbo", "vllm-models", "gpt-4"}
    eu, ca = models["gpt-4o"]["deployments"]
    assert eu == {
        "provider": "azure",
        "model": "gpt-4o-eu",
        "azure_deployment": "gpt-4o-eu",
        "api_version": "2024-10-21",
        "api_base": "https://my-endpoint-europe.openai.azure.com/",
        "api_key": "${AZURE_API_KEY_EU}",
        "name": "gpt-4o-eu",
        "rpm": 6,  # the deployment's own cap (usage-based routing: no rpm weights)
    }
    assert ca["timeouts"] == {"total": 30.0, "first_token": 10.0}
    gpt35 = models["gpt-3.5-turbo"]
    assert gpt35["deployments"][0]["api_base"] == "https://api.openai.com/v1"
    assert gpt35["deployments"][0]["price"] == {"input_per_mtok": 0.5, "output_per_mtok": 1.5}
    assert gpt35["num_retries"] == 3
    assert gpt35["fallbacks"] == ["gpt-4o"]
    assert models["vllm-models"]["deployments"][0]["model"] == "facebook/opt-125m"
    # model_group_alias: the target's deployments under the new name (a copy, not a reference)
    assert models["gpt-4"]["deployments"] == models["gpt-4o"]["deployments"]
    assert models["gpt-4"]["deployments"] is not models["gpt-4o"]["deployments"]
    assert models["gpt-4"].get("fallbacks") == models["gpt-4o"].get("fallbacks")
    # rpm/tpm stay each deployment's own cap, never a cap on the alias
    assert [d["rpm"] for d in models["gpt-4o"]["deployments"]] == [6, 6]
    assert models["gpt-3.5-turbo"]["deployments"][0]["tpm"] == 100000
    assert models["vllm-models"]["deployments"][0]["rpm"] == 1440
    assert "tenancy" not in result.config
    # router_settings wins over litellm_settings where both set a field
    assert result.config["router"] == {"num_retries": 2, "timeouts": {"total": 30.0}}
    assert result.config["health"] == {"allowed_fails": 3, "cooldown_s": 30.0}
    assert all(m["strategy"] == "least-load" for m in models.values())
    assert all(m["cache"] == {"exact": True, "ttl_s": 600.0} for m in models.values())
    # only what the fleetgate config reads (the database and Redis are process settings)
    assert result.env == ["AZURE_API_KEY_CA", "AZURE_API_KEY_EU", "OPENAI_API_KEY"]


def test_quickstart_notes_name_everything_left_out() -> None:
    notes = "\n".join(_convert(QUICKSTART).notes)
    for expected in (
        "model_list[4]: provider 'bedrock'",
        "litellm_settings.drop_params: no equivalent",
        "litellm_settings.success_callback: no equivalent",
        "litellm_settings.context_window_fallbacks: no equivalent",
        "router_settings.redis_host: no equivalent",
        "router_settings.routing_strategy: 'usage-based-routing-v2' served as 'least-load'",
        "general_settings.master_key: set FLEETGATE_MASTER_KEY",
        "general_settings.alerting: no equivalent",
        "environment_variables: no equivalent",
        "router_settings.model_group_alias: 'gpt-4' serves 'gpt-4o''s deployments",
    ):
        assert expected in notes, expected


def test_load_balancer_weights_strategy_and_default_fallbacks() -> None:
    result = _convert(LOAD_BALANCER)
    models = {m["alias"]: m for m in result.config["models"]}
    assert set(models) == {"llama-3", "claude-3-5-sonnet"}
    llama = models["llama-3"]
    assert [d["weight"] for d in llama["deployments"]] == [3, 1]
    assert {d["engine"] for d in llama["deployments"]} == {"vllm"}
    assert llama["strategy"] == "least-load"
    assert llama["fallbacks"] == ["claude-3-5-sonnet"]
    assert "fallbacks" not in models["claude-3-5-sonnet"]  # never to itself
    claude = models["claude-3-5-sonnet"]["deployments"][0]
    assert claude["provider"] == "anthropic"
    assert claude["api_base"] == "https://api.anthropic.com"
    assert result.config["router"] == {"retry_backoff_s": 0.5, "retry_backoff_max_s": 1.0}
    assert any("wildcard model_name 'openai/*'" in n for n in result.notes)


def test_the_output_loads_with_fleetgate_s_loader(tmp_path: Path) -> None:
    out = tmp_path / "fleetgate.yaml"
    out.write_text(_convert(QUICKSTART).yaml())
    env = {v: "x" for v in ("AZURE_API_KEY_EU", "AZURE_API_KEY_CA", "OPENAI_API_KEY")}
    config = load_config(out, env=env)
    alias = config.alias("gpt-4o")
    assert alias is not None and (cache := CACHE_SECTION.of(alias)) is not None and cache.exact
    assert alias.deployments[0].api_key == "x"


def test_not_a_litellm_config_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="model_list"):
        convert_litellm_config({"models": []})
    with pytest.raises(ConfigError, match="litellm_params"):
        convert_litellm_config({"model_list": [{"model_name": "x"}]})
    with pytest.raises(ConfigError, match="no model fleetgate can serve"):
        convert_litellm_config(
            {"model_list": [{"model_name": "x", "litellm_params": {"model": "bedrock/y"}}]}
        )


def test_cli_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "litellm-config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_list: [\n")
    assert main(["import", "litellm-config", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    bad.write_text("general_settings: {}\n")
    assert main(["import", "litellm-config", str(bad)]) == 2


async def test_imported_config_serves(
    tmp_path: Path, upstream: FakeUpstream, gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI writes a file; fleetgate's own loader reads it, and the gateway answers on the
    imported alias through the LiteLLM deployment's api_base and key."""
    litellm = tmp_path / "litellm.yaml"
    litellm.write_text(
        yaml.safe_dump(
            {
                "model_list": [
                    {
                        "model_name": "my-model",
                        "litellm_params": {
                            "model": "openai/up-model",
                            "api_base": upstream.url,
                            "api_key": "os.environ/UPSTREAM_KEY",
                        },
                    }
                ],
                "router_settings": {"num_retries": 1, "timeout": 20},
            }
        )
    )
    out = tmp_path / "fleetgate.yaml"
    assert main(["import", "litellm-config", str(litellm), "--out", str(out)]) == 0
    monkeypatch.setenv("UPSTREAM_KEY", "sk-upstream-secret")
    config = load_config(out)
    client: TestClient[Any, Any] = await gateway(config.model_dump(mode="json"))
    body = {"model": "my-model", "messages": [{"role": "user", "content": "hi"}]}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["choices"][0]["message"]["content"]
    assert upstream.seen[-1].headers["Authorization"] == "Bearer sk-upstream-secret"
    assert upstream.seen[-1].body["model"] == "up-model"


GROUPS_FIRST = """
model_list:
  - model_name: big
    litellm_params: {model: openai/big, api_base: http://10.0.0.1:8000/v1, rpm: 100}
  - model_name: big
    litellm_params: {model: openai/big, api_base: http://10.0.0.2:8000/v1, rpm: 300}
  - model_name: small
    litellm_params: {model: openai/small, api_base: http://10.0.0.3:8000/v1}
router_settings:
  model_group_alias: {"gpt-4": "big"}
  fallbacks: [{"big": ["small"]}]
"""


def test_group_aliases_get_what_their_target_has_whatever_the_order() -> None:
    result = _convert(GROUPS_FIRST)
    models = {m["alias"]: m for m in result.config["models"]}
    assert models["gpt-4"]["fallbacks"] == ["small"]  # set after the copy was asked for
    # simple-shuffle (the default) shares traffic by rpm: fleetgate's weights
    assert [d["weight"] for d in models["big"]["deployments"]] == [100, 300]
    assert [d["rpm"] for d in models["gpt-4"]["deployments"]] == [100, 300]
    text = result.yaml()
    assert "&id" not in text and "*id" not in text  # no anchors to edit around
    assert yaml.safe_load(text) == result.config


async def test_a_group_alias_shares_its_targets_deployment_caps(
    gateway: GatewayFactory, upstream: FakeUpstream, upstream_b: FakeUpstream
) -> None:
    """The copy names the same upstreams: one rpm window for both names, as in LiteLLM."""
    raw = yaml.safe_load(GROUPS_FIRST)
    raw["model_list"] = [raw["model_list"][0], raw["model_list"][2]]
    raw["model_list"][0]["litellm_params"].update(api_base=upstream.url, rpm=1)
    raw["model_list"][1]["litellm_params"]["api_base"] = upstream_b.url
    client = await gateway(convert_litellm_config(raw).config)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for model in ("big", "gpt-4"):
        resp = await client.post(
            "/v1/chat/completions", json={**body, "model": model}, headers=AUTH
        )
        assert resp.status == 200, await resp.text()
    # the second, under the group's name, found the upstream at its cap: the fallback answered
    assert (len(upstream.seen), len(upstream_b.seen)) == (1, 1)


HIDDEN = """
model_list:
  - model_name: big
    litellm_params: {model: openai/big, api_base: http://10.0.0.1:8000/v1}
router_settings:
  model_group_alias:
    gpt-4: {model: big, hidden: true}
    gpt-4-shown: {model: big}
    gpt-4-plain: big
"""


def test_a_hidden_group_alias_is_imported_hidden() -> None:
    result = _convert(HIDDEN)
    models = {m["alias"]: m for m in result.config["models"]}
    assert models["gpt-4"]["hidden"] is True
    for shown in ("big", "gpt-4-shown", "gpt-4-plain"):
        assert "hidden" not in models[shown], shown
    assert not any("hidden has no equivalent" in n for n in result.notes)
    alias = GatewayConfig.model_validate(yaml.safe_load(result.yaml())).alias("gpt-4")
    assert alias is not None and alias.hidden


async def test_a_hidden_alias_routes_but_is_not_listed(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    """LiteLLM's ``hidden: true``: the name answers requests (and a lookup by name) but is in
    neither ``/v1/models`` nor LiteLLM's ``/models``; a key limited to it lists nothing."""
    raw = yaml.safe_load(HIDDEN)
    raw["model_list"][0]["litellm_params"]["api_base"] = upstream.url
    client = await gateway(convert_litellm_config(raw).config)
    for path in ("/v1/models", "/models"):
        resp = await client.get(path, headers=AUTH)
        assert resp.status == 200, await resp.text()
        listed = [m["id"] for m in (await resp.json())["data"]]
        assert sorted(listed) == ["big", "gpt-4-plain", "gpt-4-shown"], (path, listed)
    resp = await client.get("/v1/models/gpt-4", headers=AUTH)
    assert resp.status == 200 and (await resp.json())["id"] == "gpt-4"
    body = {"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200, await resp.text()
    assert upstream.seen[-1].body["model"] == "big"
