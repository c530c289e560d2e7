"""Read, expand and validate the YAML config; errors name the field that is wrong."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.sectioned import field_path
from fleetgate.config.sections import Declared, check_sections
from fleetgate.errors import ConfigError

__all__ = ["load_config", "parse_config", "read_yaml"]

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


def parse_config(
    raw: Any, env: Mapping[str, str] | None = None, sections: Iterable[Declared] = ()
) -> GatewayConfig:
    """Validate an already-parsed YAML document: the ground floor, and the feature sections
    ``sections`` declares (`fleetgate.app.SECTIONS`; none: they are read when first used)."""
    if not isinstance(raw, dict):
        raise ConfigError("config: the top level must be a mapping with a 'models' list")
    expanded = _expand(raw, os.environ if env is None else env, "")
    try:
        config = GatewayConfig.model_validate(expanded)
    except ValidationError as exc:
        problems = [f"{field_path(expanded, tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems)) from None
    declared = tuple(sections)
    if declared:
        check_sections(config, declared)
    return config


def load_config(
    path: str | Path, env: Mapping[str, str] | None = None, sections: Iterable[Declared] = ()
) -> GatewayConfig:
    """Load and validate a config file (and the feature ``sections``); raises `ConfigError`
    naming each bad field."""
    return parse_config(read_yaml(path, f"config {path}"), env, sections)


def read_yaml(path: str | Path, described: str | None = None) -> Any:
    """The YAML document in file ``path``; a missing file or bad YAML raises `ConfigError`
    (``described`` names the file in the first message: the path by default)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {described or path}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
