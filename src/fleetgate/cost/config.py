"""The ``cost:`` section: where the GPUs are, what they cost, what counts as idle.

The feature is opt-in: absent (or ``enabled: false``), it is off. The old place of the
section, ``extensions.cost``, is still read, with a deprecation line in the log.

Example::

    cost:
      gpu_price_per_hour: 2.5        # $ per GPU-hour, unless a pool says otherwise
      scrape_interval_s: 15
      idle_below_util_pct: 5         # a GPU under this DCGM_FI_DEV_GPU_UTIL is idle
      target_util_pct: 60            # reclaim sizing keeps the p95 load under this
      window_h: 24                   # samples kept (and reported by default)
      pools:
        - alias: chat                # the alias whose deployments run on these GPUs
          dcgm: [http://gpu-node-1:9400/metrics]
          gpus: ["GPU-5fd4...", "GPU-77a0..."]   # only these UUIDs (default: every GPU)
          gpu_price_per_hour: 3.2
          min_gpus: 1                # never recommend fewer
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.sections import OptionalSection
from fleetgate.config.types import HttpUrl

__all__ = ["COST_SECTION", "CostConfig", "PoolConfig"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PoolConfig(_Model):
    # the alias whose deployments run on these GPUs
    alias: str = Field(min_length=1)
    # the DCGM exporter URLs of the pool's nodes
    dcgm: tuple[HttpUrl, ...] = Field(min_length=1)
    # only these GPU UUIDs (default: every GPU the exporters report)
    gpus: tuple[str, ...] = ()
    # USD per GPU-hour of this pool (none: the section's)
    gpu_price_per_hour: float | None = Field(None, ge=0)
    # never recommend fewer GPUs than this
    min_gpus: int = Field(0, ge=0)


class CostConfig(_Model):
    # `false`: the cost feature is off (as when the section is absent)
    enabled: bool = True
    # USD per GPU-hour, unless a pool says otherwise
    gpu_price_per_hour: float = Field(3.0, ge=0)
    # seconds between scrapes of the DCGM exporters
    scrape_interval_s: float = Field(15.0, ge=0.05)
    # time limit of one scrape
    scrape_timeout_s: float = Field(5.0, gt=0)
    # a GPU under this DCGM_FI_DEV_GPU_UTIL counts as idle
    idle_below_util_pct: float = Field(5.0, ge=0, le=100)
    # reclaim sizing keeps the p95 load under this
    target_util_pct: float = Field(60.0, gt=0, le=100)
    # hours of samples kept (and reported by default)
    window_h: float = Field(24.0, gt=0, le=24 * 31)
    # the GPU pools, one per alias
    pools: tuple[PoolConfig, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> CostConfig:
        names = [p.alias for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool listed twice: {', '.join(dupes)}")
        return self

    def price(self, pool: PoolConfig) -> float:
        return (
            self.gpu_price_per_hour if pool.gpu_price_per_hour is None else pool.gpu_price_per_hour
        )


def _pools_are_aliases(cost: CostConfig, config: GatewayConfig) -> None:
    unknown = sorted(p.alias for p in cost.pools if config.alias(p.alias) is None)
    if unknown:
        raise ValueError(f"cost: pool {', '.join(unknown)} is not a configured alias")


COST_SECTION = OptionalSection(
    "cost",
    CostConfig,
    check=_pools_are_aliases,
    reload={"": "live", "enabled": "restart"},  # pools, prices, intervals (reconfigure)
    presence_restart=("",),
)
"""The ``cost`` section: GPU cost per pool (absent: the feature is off)."""
