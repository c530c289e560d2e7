"""The ``scheduling:`` section of the gateway config: admission when a deployment pool is full.

Example (YAML)::

    models:
      - alias: chat
        deployments:
          - {model: m, api_base: http://10.0.0.5:8000/v1, max_num_seqs: 64, priority: true}
    scheduling:
      default_band: interactive
      critical_reserve: 0.1        # a tenth of each pool's slots: `critical` and guarantees only
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

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fleetgate.config.sections import Section

__all__ = [
    "SCHEDULING_SECTION",
    "BANDS",
    "Band",
    "BandWaits",
    "ConcurrencyQuota",
    "FleetConfig",
    "HighWater",
    "KeyPolicy",
    "OrgPolicy",
    "Quotas",
    "RateQuota",
    "SchedulingConfig",
    "TeamPolicy",
]

Band = Literal["critical", "interactive", "batch", "sheddable"]
BANDS: tuple[Band, ...] = ("critical", "interactive", "batch", "sheddable")  # highest first


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BandWaits(_Model):
    """The longest a request of each band waits in a queue before it is shed (503)."""

    # the longest a `critical` request waits in a queue (seconds)
    critical: float = Field(30.0, gt=0)
    # the same for `interactive`
    interactive: float = Field(10.0, gt=0)
    # the same for `batch`
    batch: float = Field(300.0, gt=0)
    # the same for `sheddable`
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


class ConcurrencyQuota(_Model):
    """Requests in flight per pool (Kueue's semantics): ``nominal`` is the node's own share;
    it may go up to ``borrowing_limit`` over it while others leave theirs idle (None:
    unlimited); at most ``lending_limit`` of its unused nominal is lent to others (None: all
    of it), so ``nominal - lending_limit`` stays reserved for it even while it is idle."""

    # the team's own share of requests in flight per pool (see "Quotas")
    nominal: int = Field(ge=0)
    # how far over `nominal` it may go while others leave theirs idle; none: unlimited
    borrowing_limit: int | None = Field(None, ge=0)
    # at most this much of its unused nominal is lent to others; none: all of it
    lending_limit: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _lends_at_most_nominal(self) -> ConcurrencyQuota:
        if self.lending_limit is not None and self.lending_limit > self.nominal:
            raise ValueError("lending_limit must not exceed nominal")
        return self


class RateQuota(_Model):
    """Tokens per second per pool (prompt tokens at admission, output as it streams, over the
    last ``rate_window_s``): ``nominal`` is the node's own share; past it the node borrows
    (its requests go after those of nodes under theirs), up to ``borrowing_limit`` more
    (None: unlimited), past which its requests wait until its rate falls."""

    # the team's own share of tokens per second per pool
    nominal: float = Field(ge=0)
    # how far over `nominal` it may go; none: unlimited
    borrowing_limit: float | None = Field(None, ge=0)


class Quotas(_Model):
    """A node's quotas; a resource left None is not limited for the node."""

    # the node's share of engine slots (requests at once)
    concurrency: ConcurrencyQuota | None = None
    # the node's share of tokens per second
    tokens_per_s: RateQuota | None = None


class OrgPolicy(_Model):
    """An org: the parent of the teams that name it; its quota bounds them together."""

    # the quota that bounds the org's teams together
    quota: Quotas = Quotas()


class KeyPolicy(_Model):
    """How one key's requests are scheduled when their pool is saturated; a field left
    ``None`` comes from the key's team policy, then from the key's tags, then the defaults."""

    # the key's band, over its team's
    band: Band | None = None
    # `reject`: answer 429 when its pool is saturated instead of queueing; None: `queue`
    on_saturation: Literal["queue", "reject"] | None = None
    max_wait_s: float | None = Field(None, gt=0)  # at most the band's wait
    ttft_deadline_ms: float | None = Field(None, gt=0)  # default for its requests


class TeamPolicy(KeyPolicy):
    """A team's policy: a key policy for all its keys, plus its weight in the fair share."""

    weight: float = Field(1.0, gt=0)  # share of the tokens served against other teams
    # Requests in flight per pool this team may always start, even over the pool's limit; other
    # teams borrow them while it is idle (the engine needs room for them: see scheduling.md).
    guaranteed: int = Field(0, ge=0)
    org: str | None = None  # its parent in the quota hierarchy (a key of `orgs`)
    quota: Quotas | None = None  # its own quota (None: nominal 0, it only borrows)


class FleetConfig(_Model):
    """Admission shared by every gateway process of a deployment through Redis (the settings'
    ``redis_url``; see docs/scheduling.md, "One fleet"). Without Redis each process admits
    into its own share, as before."""

    # share pools, quotas, guarantees and fair-share counters between processes when Redis is
    # configured; false: every process admits alone
    enabled: bool = True
    # spare slots a process leases beyond the requests it runs (its fast path's room)
    lease_slice: int = Field(2, ge=1, le=1024)
    # a lease not renewed this long returns to the pool (a dead process's slots come back)
    lease_ttl_s: float = Field(2.0, ge=0.1, le=60)
    # how often a process renews its leases and reads the fleet's counts (at once when a
    # request has to queue)
    sync_interval_s: float = Field(0.02, gt=0, le=5)
    # Redis unreachable past a lease's TTL: fail_open admits on this process's view alone,
    # fail_closed admits nothing new until Redis answers; none: `tenancy.limiter_failure`
    redis_failure: Literal["fail_open", "fail_closed"] | None = None
    # prefix of the scheduler's Redis keys (processes sharing it share the pools)
    key_prefix: str = Field("fg:sched:", min_length=1, max_length=64)
    # a claim counts a stream another process foresees ending within an engine step (its pace
    # and max_tokens, published at each sync) as its slot, instead of cutting a stream: fewer
    # cuts, but two claims of different processes may count on one end (the second then
    # cuts late): bench/fleet gave +1.2% output at 4 processes and +20 ms on B's p95 TTFT
    foreseen_ends: bool = False


class KueueConfig(_Model):
    """``scheduling.kueue``: how the teams' request quotas become GPU quotas."""

    # GPUs one engine slot (one request in flight) stands for: GPUs per engine / max_num_seqs
    gpus_per_slot: float = Field(gt=0, le=64)
    # the ResourceFlavor the GPUs are (its node labels pick the nodes)
    flavor: str = Field("gpu", min_length=1, max_length=63)
    # the node labels of that flavor (e.g. `nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3`)
    flavor_node_labels: dict[str, str] = Field(default_factory=dict)
    # the namespace of each team's LocalQueue (default: the team's id, as a DNS label)
    namespaces: dict[str, str] = Field(default_factory=dict)
    # the WorkloadPriorityClasses' values, highest first: production inference, evaluation,
    # experimental training
    priorities: tuple[int, int, int] = (1000, 500, 100)

    @field_validator("priorities")
    @classmethod
    def _descending(cls, value: tuple[int, int, int]) -> tuple[int, int, int]:
        if not value[0] > value[1] > value[2]:
            raise ValueError("production inference > evaluation > experimental training")
        return value


class SchedulingConfig(_Model):
    """Saturation detection and admission queues per deployment pool (an alias's deployments)."""

    # `false`: no `scheduling` stage at all (the engines see every request at once, as before) and
    # `/admin/queues` says `"enabled": false`
    enabled: bool = True
    # the band of a key with none configured or tagged
    default_band: Band = "interactive"
    # share (0 to <1) of each pool's limit that only the `critical` band (and requests within their
    # team's guarantee) may take: the headroom that gives them an engine slot at once (vLLM v1 does
    # not preempt for one)
    critical_reserve: float = Field(0.0, ge=0, lt=1)
    # Hold the reserve only while a critical request arrived in the pool within this many
    # seconds (others may use it otherwise); None: always held.
    critical_reserve_hold_s: float | None = Field(None, gt=0, le=3600)
    # share of each pool's limit that whole (non-streaming) responses of the `batch` band or
    # lower, the batch lane's lines among them, leave free (at least one slot when above 0
    # and the limit is 2 or more): nothing preempts them, so a small pool keeps a slot for
    # the next interactive request
    batch_headroom: float = Field(0.25, ge=0, lt=1)
    max_queue: int = Field(1000, ge=0)  # per pool; a full queue evicts the newest lower band
    # Requests per deployment admitted beyond its `max_num_seqs`, to wait inside the engine:
    # when a stream ends the engine starts the next at that step, not a step later (the
    # gateway learns of the end only after it). About one engine step per stream of
    # throughput (4% with 24-token answers, docs/scheduling.md); claims then cancel a stream
    # that has begun, which holds a slot. 0: the pool's limit is the engines' slots.
    engine_waiting: int = Field(0, ge=0, le=64)
    # Streams of a pool, per process, whose slot is given to the next request as they relay
    # their last chunk but one (of their `max_tokens`): that request reaches the engine while
    # the stream's last step runs and starts at the step that frees the slot, not a step
    # later. The engines hold at most this many more than the limit, and only while a stream
    # ends. 0: a slot is free once its request has ended.
    start_before_end: int = Field(0, ge=0, le=64)
    # longest queue wait of each band before a 429
    max_wait_s: BandWaits = BandWaits()
    # engine signals that mark a pool saturated (each off when none)
    high_water: HighWater = HighWater()
    # how often capacity (healthy deployments) and engine marks are re-read
    poll_interval_s: float = Field(0.05, gt=0, le=10)
    # starts from a pool's queue spaced at this x its turnover (limit / mean service time);
    # the critical band and guarantees are not paced; None: as fast as slots free
    queue_pacing: float | None = Field(None, gt=0, le=100)
    output_token_weight: float = Field(1.0, ge=0)  # cost of an output token vs an input token
    # policies by team id (as `/admin/teams` shows it; the master key is its own team `master`)
    teams: dict[str, TeamPolicy] = Field(default_factory=dict)
    # policies by key id, over the team's: the same fields but `weight`, `guaranteed`, `org`,
    # `quota`
    keys: dict[str, KeyPolicy] = Field(default_factory=dict)
    # orgs by name, each `{quota: {concurrency, tokens_per_s}}` with the fields below
    orgs: dict[str, OrgPolicy] = Field(default_factory=dict)
    rate_window_s: float = Field(10.0, gt=0, le=3600)  # tokens/s quotas: the rate's horizon
    # Cancel lower-band streams in flight (or borrowers' streams, for an owner under its
    # nominal) when a queued request has been starved this long; None: never.
    preempt_in_flight_after_s: float | None = Field(None, ge=0)
    # A request with a claim (the critical band, or within its team's guarantee or nominal
    # quota) that starts over the pool's limit, or a critical one that has to queue, cancels
    # one stream in flight without a claim: of a lower band (``lower_band``), or also, for a
    # guarantee, a borrowing team's stream of its own band (``borrowers``); None: never.
    preempt_streams_for_claims: Literal["lower_band", "borrowers"] | None = None
    # admission shared between the gateway processes through Redis
    fleet: FleetConfig = FleetConfig()
    # GPU quotas for Kueue rendered from the teams' quotas (`fleetgate kube kueue`)
    kueue: KueueConfig | None = None

    @model_validator(mode="after")
    def _orgs_exist(self) -> SchedulingConfig:
        for team, policy in self.teams.items():
            if policy.org is not None and policy.org not in self.orgs:
                raise ValueError(f"scheduling.teams.{team}.org: no org '{policy.org}' in orgs")
        return self

    @property
    def has_quotas(self) -> bool:
        """Whether any team or org has a quota (the quota checks run only then)."""
        return any(o.quota.concurrency or o.quota.tokens_per_s for o in self.orgs.values()) or any(
            t.quota is not None and (t.quota.concurrency or t.quota.tokens_per_s)
            for t in self.teams.values()
        )


SCHEDULING_SECTION = Section(
    "scheduling", SchedulingConfig, reload={"": "live", "enabled": "restart"}
)
"""The ``scheduling`` section: admission queues."""
