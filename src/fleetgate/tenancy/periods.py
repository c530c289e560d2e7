"""Calendar-aligned budget periods (UTC): daily, weekly (from Monday), monthly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

from fleetgate.limits.base import FOREVER_MS

__all__ = ["BudgetPeriod", "PERIODS", "period_bounds"]

BudgetPeriod = Literal["daily", "weekly", "monthly", "total"]
PERIODS: tuple[str, ...] = get_args(BudgetPeriod)


def period_bounds(period: str | None, now_ms: int) -> tuple[int, int]:
    """``(start_ms, end_ms)`` of the period containing ``now_ms``; ``total`` never resets."""
    if period in (None, "total"):
        return 0, FOREVER_MS
    now = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "daily":
        start, end = day, day + timedelta(days=1)
    elif period == "weekly":
        start = day - timedelta(days=day.weekday())
        end = start + timedelta(days=7)
    elif period == "monthly":
        start = day.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
    else:
        raise ValueError(f"unknown budget period {period!r}; use one of {', '.join(PERIODS)}")
    return int(start.timestamp() * 1000), int(end.timestamp() * 1000)
