"""What the registry stores: the spec of a version (validated input) and the rows it answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fleetgate.config.schema import NAME_PATTERN, DeploymentConfig

__all__ = ["DEFAULT_STAGES", "HistoryEntry", "ModelSpec", "Move", "VersionSpec"]

DEFAULT_STAGES = ("staging", "production", "previous")


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Input):
    """``POST /admin/registry/models``."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = Field(None, max_length=2000)


class VersionSpec(_Input):
    """``POST /admin/registry/models/{model}/versions``: one immutable version.

    ``deployments`` are entries like the config's ``models[].deployments[]``; their ``version``
    label is set to the registry version's name when served.
    """

    version: str | None = Field(None, pattern=NAME_PATTERN)
    artifact_uri: str = Field(min_length=1, max_length=2000)
    tokenizer: str | None = Field(None, max_length=300)
    tensor_parallel: int | None = Field(None, ge=1, le=1024)
    max_model_len: int | None = Field(None, ge=1)
    quantization: str | None = Field(None, max_length=64)
    parent_version: str | None = Field(None, pattern=NAME_PATTERN)
    card: dict[str, Any] | str = Field(default_factory=dict)
    deployments: tuple[DeploymentConfig, ...] = Field(min_length=1, max_length=64)


@dataclass(frozen=True)
class Move:
    """One stage moved by a promotion or rollback."""

    stage: str
    from_version: str | None
    to_version: str | None


@dataclass(frozen=True)
class HistoryEntry:
    id: int
    model: str
    stage: str
    action: str
    from_version: str | None
    to_version: str | None
    actor: str
    created_ms: int
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "model": self.model,
            "stage": self.stage,
            "action": self.action,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "actor": self.actor,
            "created_ms": self.created_ms,
            "detail": self.detail,
        }
