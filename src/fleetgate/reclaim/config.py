"""The ``reclaim:`` section: which pools may be put to sleep or scaled to zero when idle.

A pool is one deployment of an alias (an engine group behind one ``api_base``) that has
``wake:`` (so a request that arrives while it is reclaimed is held and woken, not failed).
Opt-in: absent (or ``enabled: false``) nothing is reclaimed.

Example::

    reclaim:
      below_util_pct: 20        # a pool under this utilisation ...
      window_s: 1800            # ... for this long is reclaimed
      pools:
        - deployment: chat-a    # a deployment id (its ``name``), with ``wake:``
          action: sleep         # vLLM sleep mode (POST /sleep), woken by the next request
        - deployment: chat-b
          action: scale_to_zero # fleetgate_reclaim_keep{pool} drops to 0: KEDA scales it to zero
          dcgm: [http://gpu-node-2:9400/metrics]   # utilisation from the GPUs, not the engine
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.sections import OptionalSection
from fleetgate.config.types import HttpUrl

__all__ = ["RECLAIM_SECTION", "ReclaimConfig", "ReclaimPool"]

Action = Literal["sleep", "scale_to_zero"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReclaimPool(_Model):
    # the deployment id (its `name`, else `<alias>/<position>`); it must have `wake:`
    deployment: str = Field(min_length=1)
    # sleep: vLLM sleep mode, woken by the next request; scale_to_zero: KEDA, through the
    # fleetgate_reclaim_keep gauge
    action: Action = "sleep"
    # this pool's threshold (none: the section's)
    below_util_pct: float | None = Field(None, ge=0, le=100)
    # this pool's window in seconds (none: the section's)
    window_s: float | None = Field(None, gt=0)
    # dcgm-exporter URLs of the pool's GPUs: utilisation from DCGM_FI_DEV_GPU_UTIL (none: from
    # the engine's requests running and waiting and the gateway's own in-flight counts)
    dcgm: tuple[HttpUrl, ...] = ()


class ReclaimConfig(_Model):
    # `false`: nothing is reclaimed (as when the section is absent)
    enabled: bool = True
    # a pool whose utilisation over the window stays under this is reclaimed
    below_util_pct: float = Field(20.0, ge=0, le=100)
    # seconds of observation under the threshold before a pool is reclaimed
    window_s: float = Field(1800.0, gt=0)
    # seconds between utilisation samples (and reclaim decisions)
    sample_interval_s: float = Field(5.0, gt=0)
    # seconds the replica that acts holds its lease (one replica acts at a time)
    lease_s: float = Field(15.0, gt=0)
    # seconds between a sleep decision reaching the other replicas and the engine's sleep
    settle_s: float = Field(2.0, ge=0)
    # seconds between the replicas' publications of their traffic
    activity_interval_s: float = Field(5.0, gt=0)
    # the pools that may be reclaimed
    pools: tuple[ReclaimPool, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> ReclaimConfig:
        names = [p.deployment for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool listed twice: {', '.join(dupes)}")
        return self

    def threshold(self, pool: ReclaimPool) -> float:
        return self.below_util_pct if pool.below_util_pct is None else pool.below_util_pct

    def window(self, pool: ReclaimPool) -> float:
        return self.window_s if pool.window_s is None else pool.window_s


def _pools_are_wakeable(reclaim: ReclaimConfig, config: GatewayConfig) -> None:
    known = {dep_id: dep for alias in config.models for dep_id, dep in alias.deployment_ids()}
    for pool in reclaim.pools:
        dep = known.get(pool.deployment)
        if dep is None:
            raise ValueError(f"reclaim: pool {pool.deployment!r} is not a configured deployment id")
        if dep.wake is None:
            raise ValueError(
                f"reclaim: pool {pool.deployment!r} has no 'wake:' (a reclaimed pool must be "
                "woken by the next request)"
            )


RECLAIM_SECTION = OptionalSection(
    "reclaim",
    ReclaimConfig,
    check=_pools_are_wakeable,
    reload={"": "live", "enabled": "restart"},  # thresholds, windows, pools: the next sample
    presence_restart=("",),  # the section adds a stage (traffic by alias) at build
)
"""The ``reclaim`` section (absent: the feature is off)."""
