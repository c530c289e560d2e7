"""Spend over time for the spend page's chart: per UTC day or hour, by team or alias, read
from the spend rollup (``fg_spend_rollup``: one row per period and group, so a month by day is
a few hundred rows whatever the traffic). The biggest ``top`` groups keep their own series;
the rest are summed into "other"."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from fleetgate.contract.principal import Principal
from fleetgate.store.database import Database
from fleetgate.tenancy.tables import spend_rollup
from fleetgate.timespans import DAY_MS, HOUR_MS

__all__ = ["STEPS", "SERIES_GROUPS", "Series", "spend_series"]

STEPS = {"day": DAY_MS, "hour": HOUR_MS}
SERIES_GROUPS = ("team", "alias")
MAX_POINTS = 400  # a longer range is charted for its last MAX_POINTS periods
_NUSD = 1e9


@dataclass(frozen=True, slots=True)
class Series:
    starts: list[int]  # each period's start (ms, UTC)
    lines: list[tuple[str | None, list[float]]]  # (team id or alias; None: "other", USD each)
    clipped: bool  # the range had more than MAX_POINTS periods: only the last are charted


def _team_scope(actor: Principal, team_id: str | None) -> str | None:
    """The team the actor may see (its own unless master or finance viewer)."""
    if actor.is_master or actor.role == "finance_viewer":
        return team_id
    return actor.team_id or ""


async def spend_series(
    db: Database,
    actor: Principal,
    group: str,
    step: str,
    since_ms: int,
    until_ms: int,
    team_id: str | None = None,
    top: int = 5,
) -> Series:
    """Spend per ``step`` period in ``[since_ms, until_ms)`` by ``group`` (team or alias)."""
    period = STEPS[step]
    start = since_ms // period * period
    if (until_ms - start) // period > MAX_POINTS:
        start, clipped = until_ms - MAX_POINTS * period, True
    else:
        clipped = False
    t = spend_rollup.c
    value = t.team_id if group == "team" else t.group_value
    query = (
        select(t.start_ms, value.label("value"), func.sum(t.cost_nusd).label("cost"))
        .where(t.dim == group, t.period_ms == period, t.start_ms >= start, t.start_ms < until_ms)
        .group_by(t.start_ms, value)
    )
    scope = _team_scope(actor, team_id)
    if scope is not None:
        query = query.where(t.team_id == scope)
    async with db.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    starts = list(range(start, until_ms, period))
    index = {s: i for i, s in enumerate(starts)}
    by_value: dict[str, list[float]] = {}
    for r in rows:
        line = by_value.setdefault(str(r.value), [0.0] * len(starts))
        line[index[int(r.start_ms)]] += int(r.cost or 0) / _NUSD
    ranked = sorted(by_value.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
    lines: list[tuple[str | None, list[float]]] = [(v, line) for v, line in ranked[:top]]
    if len(ranked) > top:
        other = [sum(col) for col in zip(*(line for _, line in ranked[top:]), strict=True)]
        lines.append((None, other))
    return Series(starts, lines, clipped)
