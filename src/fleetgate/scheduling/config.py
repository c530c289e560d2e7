"""The ``scheduling:`` section of the gateway config: admission when a deployment pool is full.

Example (YAML)::

    models:
      - alias: chat
        deployments:
          - {model: m, api_base: http://10.0.0.5:8000/v1, max_num_seqs: 64, priority: true}
    scheduling:
      default_band: interactive
      critical_reserve: 0.1            # a tenth of each pool's slots only `critical` may take
      max_wait_s: {critical: 30, interactive: 10, batch: 300, sheddable: 5}
      teams:
        team-7f3a: {band: critical, weight: 2}
        team-91c0: {band: batch, on_saturation: reject}

A pool is saturated when its requests in flight reach the sum of its deployments'
``max_num_seqs`` or when its engines say so (queue, KV cache, TTFT; see `high_water`). Below
that, requests go straight through; at it, they wait in the pool's queue by band, and within a
band by the teams' virtual token counters.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BANDS",
    "Band",
    "BandWaits",
    "HighWater",
    "KeyPolicy",
    "SchedulingConfig",
    "TeamPolicy",
]

Band = Literal["critical", "interactive", "batch", "sheddable"]
BANDS: tuple[Band, ...] = ("critical", "interactive", "batch", "sheddable")  # highest first


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BandWaits(_Model):
    """The longest a request of each band waits in a queue before it is shed (503)."""

    critical: float = Field(30.0, gt=0)
    interactive: float = Field(10.0, gt=0)
    batch: float = Field(300.0, gt=0)
    sheddable: float = Field(2.0, gt=0)

    def of(self, band: Band) -> float:
        value: float = getattr(self, band)
        return value


class HighWater(_Model):
    """Engine signals that mark a pool saturated (each off when ``None``). A pool is saturated
    by a signal when every deployment of it with a fresh reading is over the mark."""

    engine_queue: int | None = Field(None, ge=0)  # requests waiting in the engine
    kv_usage: float | None = Field(None, gt=0, le=1)  # KV cache use, 0..1
    ttft_s: float | None = Field(None, gt=0)  # recent time to first token (EWMA)


class KeyPolicy(_Model):
    """How one key's requests are scheduled when their pool is saturated; a field left
    ``None`` comes from the key's team policy, then from the key's tags, then the defaults."""

    band: Band | None = None
    on_saturation: Literal["queue", "reject"] | None = None  # None: queue
    max_wait_s: float | None = Field(None, gt=0)  # at most the band's wait
    ttft_deadline_ms: float | None = Field(None, gt=0)  # default for its requests


class TeamPolicy(KeyPolicy):
    """A team's policy: a key policy for all its keys, plus its weight in the fair share."""

    weight: float = Field(1.0, gt=0)  # share of the tokens served against other teams
    # Requests in flight per pool this team may always start, even over the pool's limit; other
    # teams borrow them while it is idle (the engine needs room for them: see scheduling.md).
    guaranteed: int = Field(0, ge=0)


class SchedulingConfig(_Model):
    """Saturation detection and admission queues per deployment pool (an alias's deployments)."""

    enabled: bool = True
    default_band: Band = "interactive"
    critical_reserve: float = Field(0.0, ge=0, lt=1)
    max_queue: int = Field(1000, ge=0)  # per pool; a full queue evicts the newest lower band
    max_wait_s: BandWaits = BandWaits()
    high_water: HighWater = HighWater()
    poll_interval_s: float = Field(0.05, gt=0, le=10)
    output_token_weight: float = Field(1.0, ge=0)  # cost of an output token vs an input token
    teams: dict[str, TeamPolicy] = Field(default_factory=dict)
    keys: dict[str, KeyPolicy] = Field(default_factory=dict)
