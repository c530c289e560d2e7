"""The GPU cost report: utilisation, idle GPU-hours and their cost per pool and per team, and
what to reclaim.

Per pool, over the window (``dt``-weighted over the ledger's ticks)::

    gpu_hours       = sum(gpus * dt) / 3600          cost_usd      = gpu_hours * price
    busy_gpu_hours  = sum(util/100 * dt) / 3600      utilisation   = busy / gpu_hours
    idle_gpu_hours  = sum(gpus under idle_below_util_pct * dt) / 3600
    idle_cost_usd   = idle_gpu_hours * price         (and per 30-day month at this rate)

A team's share of a pool is its share of the tokens (input + output) the pool's alias served in
the window (the spend table); its cost and idle cost are that share of the pool's.

Reclaim, per pool: ``needed = max(min_gpus, ceil(p95(busy GPU-equivalents) / target_util))``.
``scale_to_zero`` when no GPU was ever above the idle threshold and its engines never had a
request in flight; ``release`` ``gpus - needed`` when fewer suffice; ``keep`` otherwise; ``wait``
with under ten ticks observed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from sqlalchemy import and_, func, select

from fleetgate.cost.config import CostConfig, PoolConfig
from fleetgate.cost.ledger import CostLedger, PoolTick
from fleetgate.store.database import Database
from fleetgate.tenancy.tables import spend, teams

__all__ = ["MONTH_H", "pool_report", "team_tokens", "team_rows"]

MONTH_H = 720.0
MIN_TICKS = 10


def _reclaim(
    pool: PoolConfig, ticks: list[PoolTick], cfg: CostConfig, price: float
) -> dict[str, Any]:
    gpus = ticks[-1].gpus if ticks else 0
    if len(ticks) < MIN_TICKS:
        return {"action": "wait", "gpus": gpus, "reclaim_gpus": 0,
                "reason": f"{len(ticks)} samples; at least {MIN_TICKS} are needed"}  # fmt: skip
    busy = np.array([t.busy for t in ticks])
    p95 = float(np.percentile(busy, 95))
    inflight = [t.engine_inflight for t in ticks if t.engine_inflight is not None]
    never_busy = all(t.idle_gpus == t.gpus for t in ticks) and not any(inflight)
    needed = max(pool.min_gpus, math.ceil(p95 / (cfg.target_util_pct / 100.0) - 1e-9))
    if never_busy:
        action, reclaim = "scale_to_zero", max(0, gpus - pool.min_gpus)
        reason = ("no GPU above the idle threshold and no request in flight the whole window: "
                  "scale the pool to zero or put its engines to sleep")  # fmt: skip
    elif needed < gpus:
        action, reclaim = "release", gpus - needed
        reason = (f"p95 load {p95:.2f} GPU-equivalents fits {needed} GPUs at "
                  f"{cfg.target_util_pct:g}% target utilisation")  # fmt: skip
    else:
        action, reclaim = "keep", 0
        reason = f"p95 load {p95:.2f} GPU-equivalents needs all {gpus} GPUs"
    return {
        "action": action, "gpus": gpus, "needed_gpus": needed, "reclaim_gpus": reclaim,
        "p95_busy_gpus": p95, "savings_per_month_usd": reclaim * price * MONTH_H,
        "reason": reason,
    }  # fmt: skip


def pool_report(
    cfg: CostConfig, ledger: CostLedger, pool: PoolConfig, since: float
) -> dict[str, Any]:
    """One pool's row (see the module docstring for every figure)."""
    ticks = ledger.ticks(pool.alias, since)
    price = cfg.price(pool)
    observed_s = sum(t.dt for t in ticks)
    gpu_h = sum(t.gpus * t.dt for t in ticks) / 3600.0
    busy_h = sum(t.busy * t.dt for t in ticks) / 3600.0
    idle_h = sum(t.idle_gpus * t.dt for t in ticks) / 3600.0
    known = [t for t in ticks if t.engine_inflight is not None]
    known_s = sum(t.dt for t in known)
    fb = [t.fb_used_fraction for t in ticks if t.fb_used_fraction is not None]
    idle_cost = idle_h * price
    return {
        "pool": pool.alias,
        "gpus": ticks[-1].gpus if ticks else 0,
        "observed_hours": observed_s / 3600.0,
        "gpu_hours": gpu_h,
        "busy_gpu_hours": busy_h,
        "utilisation": busy_h / gpu_h if gpu_h > 0 else None,
        "idle_gpu_hours": idle_h,
        "price_per_gpu_hour": price,
        "cost_usd": gpu_h * price,
        "idle_cost_usd": idle_cost,
        "idle_cost_per_month_usd": idle_cost / observed_s * 3600.0 * MONTH_H if observed_s else 0.0,
        "engine_idle_fraction": sum(t.dt for t in known if not t.engine_inflight) / known_s
        if known_s > 0
        else None,
        "memory_used_fraction": float(np.mean(fb)) if fb else None,
        "current": [
            {
                "uuid": s.uuid,
                "gpu": s.gpu,
                "host": s.host,
                "model": s.model,
                "util_pct": s.util_pct,
                "fb_used_mib": s.fb_used_mib,
            }
            for s in ledger.last.get(pool.alias, [])
        ],  # fmt: skip
        "recommendation": _reclaim(pool, ticks, cfg, price),
    }


async def team_tokens(
    db: Database, aliases: list[str], since_ms: int, team_id: str | None = None
) -> tuple[dict[tuple[str | None, str], int], dict[str, str]]:
    """Tokens served per (team id, alias) since ``since_ms`` (successful requests), and team
    names by id."""
    tokens = func.coalesce(func.sum(spend.c.input_tokens + spend.c.output_tokens), 0)
    where = [spend.c.created_ms >= since_ms, spend.c.alias.in_(aliases), spend.c.status < 400]
    if team_id is not None:
        where.append(spend.c.team_id == team_id)
    query = (
        select(spend.c.team_id, spend.c.alias, tokens.label("tokens"))
        .where(and_(*where))
        .group_by(spend.c.team_id, spend.c.alias)
    )
    async with db.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
        names = dict((await conn.execute(select(teams.c.id, teams.c.name))).all())
    return {(r.team_id, r.alias): int(r.tokens) for r in rows}, names


def team_rows(
    pools: list[dict[str, Any]],
    tokens: Mapping[tuple[str | None, str], int],
    pool_totals: Mapping[str, int],
    names: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Each team's share of each pool's cost by tokens served (``pool_totals``: every team's
    tokens per alias, so a team-scoped ``tokens`` still gets its true share)."""
    by_pool = {p["pool"]: p for p in pools}
    out = []
    for (team, alias), n in sorted(tokens.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        pool = by_pool.get(alias)
        total = pool_totals.get(alias, 0)
        if pool is None or total <= 0:
            continue
        share = n / total
        out.append({
            "team": team, "team_name": names.get(team or "", None), "pool": alias,
            "tokens": n, "share": share, "cost_usd": pool["cost_usd"] * share,
            "idle_cost_usd": pool["idle_cost_usd"] * share,
            "idle_gpu_hours": pool["idle_gpu_hours"] * share,
        })  # fmt: skip
    return out
