"""Process settings: where things live and how to reach them (not routing config)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    """Built once by the CLI (or a test) and passed down; nothing reads the environment later.

    ``config_path`` names the YAML file that hot reload watches; ``config_text`` lets tests
    pass a config without a file.
    """

    master_key: str | None = None
    config_path: Path | None = None
    host: str = "127.0.0.1"
    port: int = 4000
    workers: int = 1
    data_dir: Path = Path(".fleetgate")
    database_url: str | None = None
    redis_url: str | None = None
    watch_config: bool = True
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, object] = {
            "master_key": env.get("FLEETGATE_MASTER_KEY") or None,
            "data_dir": Path(env.get("FLEETGATE_DATA_DIR", ".fleetgate")),
            "database_url": env.get("FLEETGATE_DATABASE_URL") or None,
            "redis_url": env.get("FLEETGATE_REDIS_URL") or None,
        }
        if env.get("FLEETGATE_CONFIG"):
            values["config_path"] = Path(env["FLEETGATE_CONFIG"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
