"""The ``insights:`` section: plans per team or key, revenue per plan, the key report's rules.

Opt-in: absent (or ``enabled: false``), nothing is recorded and the insights routes answer 503.

Example::

    insights:
      default_plan: free
      paid_plans: [paid, enterprise]          # a move from any other plan to these converts
      plans:
        teams: {team-acme: enterprise}
        keys: {key-0001: paid}                # a key's plan wins over its team's
      revenue_usd_month: {paid: 20, enterprise: 60}
      unused_key_days: 30
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fleetgate.config.sections import OptionalSection

__all__ = ["INSIGHTS_SECTION", "InsightsConfig", "PlanBook"]

_PLAN = r"^[A-Za-z0-9_.-]{1,32}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlanBook(_Model):
    # plan of every key of a team (team id -> plan)
    teams: dict[str, str] = Field(default_factory=dict)
    # plan of one key (key id -> plan); wins over its team's
    keys: dict[str, str] = Field(default_factory=dict)


class InsightsConfig(_Model):
    # false: the feature is off (as when the section is absent)
    enabled: bool = True
    # the plan of a request whose key and team have none in `plans`
    default_plan: str = Field("free", pattern=_PLAN)
    # the plans that pay: a user whose first plan is another one and who later uses one of
    # these counts as converted
    paid_plans: tuple[str, ...] = ("paid", "enterprise")
    # plans per team and per key
    plans: PlanBook = Field(default_factory=PlanBook)
    # revenue per active user of a plan per 30 days, in USD (cost against revenue)
    revenue_usd_month: dict[str, float] = Field(default_factory=dict)
    # the key report lists keys not used for this many days
    unused_key_days: int = Field(30, ge=1, le=3650)
    # an answer whose groundedness score is below this is counted as hallucinated
    grounding_threshold: float = Field(0.6, ge=0, le=1)
    # share of answers posted to /v1/insights/grounding that are scored (by response id)
    grounding_share: float = Field(1.0, ge=0, le=1)
    # per alias, the share of requests sampled into the human review queue (absent: none)
    review_share: dict[str, float] = Field(default_factory=dict)
    # the criteria a reviewer scores, each 1-5
    review_rubric: tuple[str, ...] = ("correct", "helpful", "safe")
    # a cut stream followed by another request of its session within this many seconds was
    # not abandoned
    follow_up_s: float = Field(120.0, gt=0, le=86_400)
    # rows buffered in memory before a flush (beyond it, the oldest are dropped and counted)
    max_buffered: int = Field(100_000, ge=100, le=10_000_000)
    # how often buffered rows are written, seconds
    flush_interval_s: float = Field(2.0, gt=0, le=300)
    # how often the business and quality gauges (/metrics) are refreshed from the database
    # (the refresh first stores the rollups of the days and hours that have ended)
    metrics_interval_s: float = Field(30.0, ge=1, le=3600)
    # the longest a report a page or the admin API shows may be kept in memory, seconds (0:
    # never; reports read the stored rollups of ended days and hours either way)
    report_cache_s: float = Field(60.0, ge=0, le=3600)

    @field_validator("review_share")
    @classmethod
    def _shares(cls, value: dict[str, float]) -> dict[str, float]:
        if any(not 0 <= share <= 1 for share in value.values()):
            raise ValueError("each review_share is a share from 0 to 1")
        return value

    def plan_of(self, team_id: str | None, key_id: str) -> str:
        """The plan a request of ``key_id`` (of ``team_id``) is on."""
        plan = self.plans.keys.get(key_id)
        if plan is None and team_id is not None:
            plan = self.plans.teams.get(team_id)
        return plan or self.default_plan


INSIGHTS_SECTION = OptionalSection(
    "insights",
    InsightsConfig,
    reload={"": "live", "enabled": "restart"},
    presence_restart=("",),  # its stage joins the request path at start
)
"""The ``insights`` section (opt-in)."""
