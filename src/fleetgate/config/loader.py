"""Read, expand and validate the YAML config; errors name the field that is wrong."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fleetgate.config.schema import GatewayConfig
from fleetgate.errors import ConfigError

__all__ = ["load_config", "parse_config"]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, env: Mapping[str, str], path: str) -> Any:
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(f"{path}: environment variable {name} is not set")

        return _ENV_REF.sub(sub, value)
    if isinstance(value, list):
        return [_expand(v, env, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _expand(v, env, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    return value


def _field_path(raw: Any, loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location like models[0](alias=fast).deployments[1].api_base."""
    out = ""
    node = raw
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if isinstance(node, dict) and "alias" in node:
                out += f"(alias={node['alias']})"
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(root)"


def parse_config(raw: Any, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Validate an already-parsed YAML document."""
    if not isinstance(raw, dict):
        raise ConfigError("config: the top level must be a mapping with a 'models' list")
    expanded = _expand(raw, os.environ if env is None else env, "")
    try:
        return GatewayConfig.model_validate(expanded)
    except ValidationError as exc:
        problems = [f"{_field_path(expanded, tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems)) from None


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Load and validate a config file; raises `ConfigError` naming each bad field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(raw, env)
