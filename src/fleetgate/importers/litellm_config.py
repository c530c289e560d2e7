"""A LiteLLM proxy config (``model_list``, ``router_settings``, ``litellm_settings``,
``general_settings``) turned into a fleetgate config, with a note for everything that has no
equivalent.

Example::

    result = convert_litellm_config(yaml.safe_load(open("litellm.yaml")))
    print(result.yaml())         # a fleetgate config; `load_config` accepts it
    for note in result.notes:    # what was approximated or left out, by path
        print(note)

LiteLLM's ``os.environ/VAR`` references become ``${VAR}`` (expanded by fleetgate's loader at
start-up). Deployments of providers fleetgate does not speak (Bedrock, Vertex, ...) are left
out with a note; an alias left without deployments is left out, and so are fallbacks to it.

Why one module: it is one converter (`_Converter`) run once over one LiteLLM file, in that
file's order: ``model_list`` builds the aliases, then ``router_settings`` and
``litellm_settings`` edit them in place (rpm weights, default fallbacks,
``model_group_alias``), and every step appends to the one list of notes and the one set of
environment variables. The mapping tables at the top (`_STRATEGIES`, `_OPENAI_LIKE`,
`_DEFAULT_BASES`, `_QUIET_PARAMS`) are what a reader checks each step against. Split by LiteLLM
section, the half-built aliases and the notes would be passed between modules, and the result
is checked only once, at the end, by loading it (`parse_config`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from fleetgate.config.loader import parse_config
from fleetgate.errors import ConfigError

__all__ = ["ImportResult", "convert_litellm_config"]

_ENV_PREFIX = "os.environ/"
_ALIAS_OK = re.compile(r"[^A-Za-z0-9._:/@-]")

# LiteLLM's routing_strategy -> fleetgate's strategy (and whether it is only close).
_STRATEGIES: dict[str, tuple[str, bool]] = {
    "simple-shuffle": ("weighted", False),
    "least-busy": ("least-load", False),
    "latency-based-routing": ("latency", False),
    "cost-based-routing": ("cost", False),
    "usage-based-routing": ("least-load", True),
    "usage-based-routing-v2": ("least-load", True),
}

# Provider prefixes of LiteLLM's model strings that fleetgate serves, and their default bases.
_OPENAI_LIKE = {"openai", "text-completion-openai", "hosted_vllm", "vllm", "openai_like",
                "custom_openai", "llamacpp", "lm_studio", "ollama", "ollama_chat"}  # fmt: skip
_DEFAULT_BASES = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "ollama": "http://localhost:11434/v1",
    "ollama_chat": "http://localhost:11434/v1",
}
# litellm_params that only tune LiteLLM's own call and need nothing in fleetgate.
_QUIET_PARAMS = {"model", "api_base", "api_key", "api_version", "rpm", "tpm", "timeout",
                 "stream_timeout", "weight", "input_cost_per_token", "output_cost_per_token",
                 "cache_read_input_token_cost", "base_url"}  # fmt: skip


@dataclass
class ImportResult:
    """The fleetgate config (a plain dict, validated) and the notes on what did not carry."""

    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)  # environment variables the config reads

    def yaml(self) -> str:
        """The config as YAML to edit by hand: no anchors or aliases (``&id001``)."""
        head = "# Imported from a LiteLLM proxy config by `fleetgate import litellm-config`.\n"
        return head + yaml.dump(
            self.config, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True
        )


class _PlainDumper(yaml.SafeDumper):
    """Writes a value met twice out in full both times."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class _AnyEnv(Mapping[str, str]):
    """Every variable present: validation without the deployment's secrets."""

    def __getitem__(self, key: str) -> str:
        return "imported-placeholder"

    def __contains__(self, key: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _price(params: dict[str, Any], info: dict[str, Any]) -> dict[str, float]:
    """LiteLLM's USD per token -> fleetgate's USD per million tokens."""
    out = {}
    for src, dst in (
        ("input_cost_per_token", "input_per_mtok"),
        ("output_cost_per_token", "output_per_mtok"),
        ("cache_read_input_token_cost", "cached_input_per_mtok"),
    ):
        value = params.get(src, info.get(src))
        if isinstance(value, int | float):
            out[dst] = round(float(value) * 1_000_000, 9)
    return out


def _numbers(params: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """Weight, prices, timeouts and token limits of one deployment."""
    dep: dict[str, Any] = {}
    if isinstance(params.get("weight"), int | float):
        dep["weight"] = params["weight"]
    price = _price(params, info)
    if price:
        dep["price"] = price
    timeouts = {}
    if isinstance(params.get("timeout"), int | float):
        timeouts["total"] = float(params["timeout"])
    if isinstance(params.get("stream_timeout"), int | float):
        timeouts["first_token"] = float(params["stream_timeout"])
    if timeouts:
        dep["timeouts"] = timeouts
    if isinstance(info.get("max_input_tokens"), int):
        dep["context_window"] = info["max_input_tokens"]
    if isinstance(info.get("max_output_tokens"), int):
        dep["max_output_tokens"] = info["max_output_tokens"]
    return dep


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _router_field(key: str, value: Any, rcfg: dict[str, Any], health: dict[str, Any]) -> bool:
    """One of router_settings' plain numbers into fleetgate's router or health section."""
    number = _number(value)
    if number is None:
        return False
    if key == "num_retries":
        rcfg["num_retries"] = min(int(number), 10)
    elif key in ("timeout", "request_timeout"):
        rcfg.setdefault("timeouts", {})["total"] = number
    elif key == "stream_timeout":
        rcfg.setdefault("timeouts", {})["first_token"] = number
    elif key == "retry_after":
        rcfg["retry_backoff_s"] = number
        rcfg["retry_backoff_max_s"] = max(number, 1.0)
    elif key == "allowed_fails" and number >= 1:
        health["allowed_fails"] = int(number)
    elif key == "cooldown_time" and number > 0:
        health["cooldown_s"] = number
    else:
        return False
    return True


class _Converter:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.notes: list[str] = []
        self.env: set[str] = set()
        self.aliases: dict[str, dict[str, Any]] = {}

    def note(self, path: str, what: str) -> None:
        self.notes.append(f"{path}: {what}")

    def value(self, value: Any) -> Any:
        """``os.environ/VAR`` -> ``${VAR}``, anywhere in a value."""
        if isinstance(value, str) and value.startswith(_ENV_PREFIX):
            name = value[len(_ENV_PREFIX) :]
            self.env.add(name)
            return "${" + name + "}"
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def section(self, name: str) -> dict[str, Any]:
        value = self.raw.get(name) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: must be a mapping")
        return value

    # --- model_list ----------------------------------------------------------------------

    def models(self) -> None:
        entries = self.raw.get("model_list")
        if not isinstance(entries, list) or not entries:
            raise ConfigError("model_list: a LiteLLM config needs a non-empty list of models")
        for i, entry in enumerate(entries):
            path = f"model_list[{i}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("model_name"), str):
                raise ConfigError(f"{path}: needs model_name and litellm_params")
            params = entry.get("litellm_params")
            if not isinstance(params, dict) or not isinstance(params.get("model"), str):
                raise ConfigError(f"{path}.litellm_params: needs a model string")
            name = entry["model_name"]
            if "*" in name:
                self.note(path, f"wildcard model_name {name!r} has no equivalent (left out)")
                continue
            alias = _ALIAS_OK.sub("-", name)
            if alias != name:
                self.note(path, f"model_name {name!r} served as alias {alias!r}")
            deployment = self.deployment(path, params, entry.get("model_info") or {})
            if deployment is None:
                continue
            target = self.aliases.setdefault(alias, {"alias": alias, "deployments": []})
            target["deployments"].append(deployment)
            for field_name in ("rpm", "tpm"):  # the deployment's own cap, as in LiteLLM
                value = params.get(field_name)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    deployment[field_name] = value
            for key in sorted(set(params) - _QUIET_PARAMS):
                if key == "max_retries":
                    target["num_retries"] = min(int(params[key]), 10)
                else:
                    self.note(f"{path}.litellm_params.{key}", "no equivalent (left out)")

    def deployment(
        self, path: str, params: dict[str, Any], info: dict[str, Any]
    ) -> dict[str, Any] | None:
        model: str = params["model"]
        provider, _, name = model.partition("/")
        if not name:
            provider, name = ("anthropic" if model.startswith("claude") else "openai"), model
        dep = self.provider(provider, name, params)
        if provider == "azure" and not params.get("api_version"):
            self.note(path, f"no api_version: {dep and dep['api_version']} assumed")
        if dep is None:
            self.note(
                path, f"provider {provider!r} ({model}) is not served by fleetgate (left out)"
            )
            return None
        base = self.value(params.get("api_base") or params.get("base_url"))
        base = base or _DEFAULT_BASES.get(provider)
        if not base:
            self.note(path, f"{model}: no api_base and no default for {provider!r} (left out)")
            return None
        if provider.startswith("ollama") and not str(base).rstrip("/").endswith("/v1"):
            base = str(base).rstrip("/") + "/v1"  # Ollama's OpenAI-compatible API
        dep["api_base"] = base
        if params.get("api_key") is not None:
            dep["api_key"] = self.value(params["api_key"])
        if info.get("id") is not None:
            dep["name"] = str(info["id"])
        dep.update(_numbers(params, info))
        return dep

    def provider(self, provider: str, name: str, params: dict[str, Any]) -> dict[str, Any] | None:
        if provider == "azure":
            version = self.value(params.get("api_version")) or "2024-10-21"
            return {"provider": "azure", "model": name, "azure_deployment": name,
                    "api_version": version}  # fmt: skip
        if provider == "anthropic":
            return {"provider": "anthropic", "model": name}
        if provider not in _OPENAI_LIKE:
            return None
        dep = {"provider": "openai", "model": name}
        engine = {"hosted_vllm": "vllm", "vllm": "vllm", "llamacpp": "llamacpp"}.get(provider)
        if engine is not None:
            dep["engine"] = engine
        return dep

    # --- router_settings / litellm_settings ---------------------------------------------

    def fallbacks(self, path: str, value: Any) -> None:
        if not isinstance(value, list):
            self.note(path, "not a list (left out)")
            return
        for item in value:
            if not isinstance(item, dict):
                continue
            for src, targets in item.items():
                alias = self.aliases.get(_ALIAS_OK.sub("-", str(src)))
                if alias is None:
                    self.note(path, f"fallback from {src!r}: no such model (left out)")
                    continue
                chain = list(alias.get("fallbacks", []))
                for t in targets if isinstance(targets, list) else [targets]:
                    name = _ALIAS_OK.sub("-", str(t))
                    if name not in self.aliases or name == alias["alias"]:
                        self.note(path, f"fallback {src!r} -> {t!r}: no such model (left out)")
                    elif name not in chain:
                        chain.append(name)
                if chain:
                    alias["fallbacks"] = chain

    def settings(
        self, router: dict[str, Any], settings: dict[str, Any], out: dict[str, Any]
    ) -> None:
        rcfg: dict[str, Any] = {}
        health: dict[str, Any] = {}
        merged = {**settings, **router}  # router_settings wins where both set a field
        origin = {k: "router_settings" for k in router} | {
            k: "litellm_settings" for k in settings if k not in router
        }
        groups: tuple[str, dict[str, Any]] | None = None
        for key, value in merged.items():
            path = f"{origin[key]}.{key}"
            if _router_field(key, value, rcfg, health) or key in ("cache", "cache_params"):
                continue  # the cache is handled by cache() below
            if key == "routing_strategy":
                self.strategy(path, str(value))
            elif key == "fallbacks":
                self.fallbacks(path, value)
            elif key == "default_fallbacks" and isinstance(value, list):
                self.default_fallbacks(path, value)
            elif key == "model_group_alias" and isinstance(value, dict):
                groups = (path, value)  # after fallbacks and strategy: the copy gets them
            else:
                self.note(path, "no equivalent (left out)")
        self.rpm_weights(merged.get("routing_strategy"))
        if groups is not None:
            self.group_aliases(*groups)
        if rcfg:
            out["router"] = rcfg
        if health:
            out["health"] = health
        self.cache(settings, out)

    def rpm_weights(self, strategy: Any) -> None:
        """LiteLLM's simple-shuffle picks deployments in proportion to their ``rpm`` (else
        ``tpm``) when they set one and no ``weight``: the same shares as fleetgate weights."""
        if strategy not in (None, "simple-shuffle"):
            return
        for alias in self.aliases.values():
            deps = alias["deployments"]
            if len(deps) < 2 or any("weight" in d for d in deps):
                continue
            for field_name in ("rpm", "tpm"):
                if all(field_name in d for d in deps):
                    for d in deps:
                        d["weight"] = d[field_name]
                    break

    def strategy(self, path: str, value: str) -> None:
        mapped = _STRATEGIES.get(value)
        if mapped is None:
            self.note(path, f"routing strategy {value!r} has no equivalent (weighted is used)")
            return
        name, approximate = mapped
        if approximate:
            self.note(path, f"{value!r} served as {name!r} (in-flight load, not rpm/tpm usage)")
        for alias in self.aliases.values():
            alias["strategy"] = name

    def default_fallbacks(self, path: str, value: list[Any]) -> None:
        names = [_ALIAS_OK.sub("-", str(v)) for v in value]
        for alias in self.aliases.values():
            if "fallbacks" not in alias:
                chain = [n for n in names if n in self.aliases and n != alias["alias"]]
                if chain:
                    alias["fallbacks"] = chain
        for n in names:
            if n not in self.aliases:
                self.note(path, f"default fallback {n!r}: no such model (left out)")

    def group_aliases(self, path: str, value: dict[str, Any]) -> None:
        """LiteLLM's ``model_group_alias`` (a name that serves another model group): a copy
        of that alias under the new name, ``hidden`` (routed, not listed) when it says so."""
        for name, target in value.items():
            group = target.get("model") if isinstance(target, dict) else target
            source = self.aliases.get(_ALIAS_OK.sub("-", str(group)))
            new = _ALIAS_OK.sub("-", str(name))
            if source is None or new in self.aliases:
                self.note(path, f"{name!r} -> {group!r}: no such model or name taken (left out)")
                continue
            # a copy, not a shared object: the YAML written has no anchors to edit around
            alias = {**copy.deepcopy(source), "alias": new, "description": f"alias of {group}"}
            alias.pop("hidden", None)
            if isinstance(target, dict) and target.get("hidden"):
                alias["hidden"] = True  # routes, not listed by /v1/models
            self.aliases[new] = alias
            self.note(
                path,
                f"{name!r} serves {group!r}'s deployments under its own name (one upstream: "
                "health and each deployment's rpm/tpm shared; key limits per name)",
            )

    def cache(self, settings: dict[str, Any], out: dict[str, Any]) -> None:
        """``litellm_settings.cache: true``: every alias gets fleetgate's exact response cache."""
        if not settings.get("cache"):
            return
        params = settings.get("cache_params") or {}
        spec: dict[str, Any] = {"exact": True}
        if isinstance(params, dict) and isinstance(params.get("ttl"), int | float):
            spec["ttl_s"] = float(params["ttl"])
        for alias in self.aliases.values():
            alias["cache"] = spec
        if isinstance(params, dict):
            for key in sorted(set(params) - {"type", "ttl", "host", "port", "password"}):
                self.note(f"litellm_settings.cache_params.{key}", "no equivalent (left out)")
            if params.get("type") == "redis":
                self.note(
                    "litellm_settings.cache_params",
                    "Redis is the process's one Redis: set FLEETGATE_REDIS_URL",
                )

    def general(self, general: dict[str, Any]) -> None:
        for key in general:
            path = f"general_settings.{key}"
            if key == "master_key":
                self.note(path, "set FLEETGATE_MASTER_KEY (a process setting, not config)")
            elif key == "database_url":
                self.note(path, "set FLEETGATE_DATABASE_URL (a process setting, not config)")
            else:
                self.note(path, "no equivalent (left out)")

    def convert(self) -> ImportResult:
        self.models()
        out: dict[str, Any] = {}
        self.settings(self.section("router_settings"), self.section("litellm_settings"), out)
        self.general(self.section("general_settings"))
        for key in sorted(set(self.raw) - {"model_list", "router_settings", "litellm_settings",
                                           "general_settings"}):  # fmt: skip
            self.note(key, "no equivalent (left out)")
        if not self.aliases:
            raise ConfigError("model_list: no model fleetgate can serve (see the notes)")
        out = {"models": list(self.aliases.values()), **out}
        parse_config(out, env=_AnyEnv())  # the result must load; raises ConfigError if not
        return ImportResult(out, self.notes, sorted(self.env))


def convert_litellm_config(raw: Any) -> ImportResult:
    """Translate a parsed LiteLLM proxy config; raises `ConfigError` when it is not one."""
    if not isinstance(raw, dict):
        raise ConfigError("a LiteLLM config is a mapping with a model_list")
    return _Converter(raw).convert()
