"""The ``canary:`` section of the gateway config: where version splits are shared.

Example (YAML)::

    canary:
      redis_url: redis://127.0.0.1:6379/0   # else Settings.redis_url; none: this process only
      redis_prefix: "fg:"
      refresh_interval_s: 5                 # safety net behind the pub/sub notification

Splits themselves are set at run time through the admin API
(``PUT /admin/aliases/{alias}/split``), not in this file.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CanaryConfig"]


class CanaryConfig(BaseModel):
    """Sharing of canary splits between replicas."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    redis_url: str | None = None
    redis_prefix: str = "fg:"
    refresh_interval_s: float = Field(5.0, gt=0)
