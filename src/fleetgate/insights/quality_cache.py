"""`QualityCache`: the quality report from the closed hours' rollups, and their closing.

A report of whole UTC days reads the stored rollups of its closed hours and computes the others
(`insights.hour_rollup.hour_report`): on any replica, fresh or not, a 30-day report computes
only the last hour or two of today. The whole report is then kept for ``ttl_s`` (a page
reloaded within it reads nothing); this process's own writes of side rows drop the kept
reports at once (`invalidate`), another replica's within ``ttl_s``.

`close` (the background's job, `insights.metrics`) stores the rollup of every hour written to
and not current whose follow-up window ended ``settle_s`` ago, newest first, within a time
budget; every replica may run it (`insights.marks` keeps two from storing one hour twice).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fleetgate.insights.hour_rollup import (
    DAY_HOURS,
    close_hours,
    hour_report,
    span,
    split_current,
)
from fleetgate.insights.marks import HOUR, read_marks
from fleetgate.store.database import Database
from fleetgate.timespans import HOUR_MS

__all__ = ["QualityCache"]

_KEPT = 64  # reports kept (ranges and teams asked for)


class QualityCache:
    def __init__(
        self,
        db: Database,
        follow_up_s: Callable[[], float],
        *,
        ttl_s: float = 30.0,
        settle_s: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._follow_up_s = follow_up_s
        self.ttl_s, self.settle_s = ttl_s, settle_s
        self._clock = clock
        self._kept: OrderedDict[tuple[int, int, str | None], tuple[float, list[dict[str, Any]]]]
        self._kept = OrderedDict()
        self.computed_hours = 0  # hours computed from the requests (for tests and the bench)

    def _gap_ms(self) -> int:
        return int(self._follow_up_s() * 1000)

    def invalidate(self) -> None:
        """Drop the kept reports (a review, an event or a sample was just written here)."""
        self._kept.clear()

    async def report(self, first: int, last: int, team_id: str | None) -> list[dict[str, Any]]:
        """`insights.quality.quality_report` of the days ``[first, last]``, cut to a team."""
        key = (first, last, team_id)
        now = self._clock()
        held = self._kept.get(key)
        if held is not None and now - held[0] <= self.ttl_s:
            self._kept.move_to_end(key)
            return [dict(row) for row in held[1]]
        async with self._db.engine.connect() as conn:
            rows, computed = await hour_report(
                conn, first * DAY_HOURS, (last + 1) * DAY_HOURS - 1, team_id, self._gap_ms()
            )
        self.computed_hours += computed
        if self.ttl_s > 0:
            self._kept[key] = (now, [dict(row) for row in rows])
            while len(self._kept) > _KEPT:
                self._kept.popitem(last=False)
        return rows

    def last_closable(self) -> int:
        """The newest hour whose follow-up window ended ``settle_s`` ago."""
        now_ms = int(self._clock() * 1000)
        return (now_ms - self._gap_ms() - int(self.settle_s * 1000)) // HOUR_MS - 1

    async def close(self, days: int = 400, budget_s: float = 20.0) -> int:
        """Store the rollups of the closable hours of the last ``days`` days written to and
        not current, newest day first, until ``budget_s`` is spent; how many were stored."""
        last = self.last_closable()
        first = (last // DAY_HOURS - days + 1) * DAY_HOURS
        gap_ms = self._gap_ms()
        async with self._db.engine.connect() as conn:
            marks = await read_marks(conn, HOUR, first, span(last, gap_ms)[1])
        _, live = split_current(marks, range(first, last + 1), gap_ms)
        todo = sorted(live, reverse=True)
        started = time.monotonic()
        stored = 0
        while todo and time.monotonic() - started < budget_s:
            day = todo[0] // DAY_HOURS
            hours = [h for h in todo if h // DAY_HOURS == day]
            todo = todo[len(hours) :]
            stored += await close_hours(self._db, hours, gap_ms)
        return stored
