"""`InsightsReports`: the insights read side and the review scoring, shared by the admin API
(`insights.routes`, `insights.quality_routes`) and the console's pages (`console.insights`).

Reports read the closed rollups every replica shares (finished days' business figures,
`insights.day_rollup`; finished hours' quality figures, `insights.hour_rollup`) and compute
only what is not closed (today, mostly), so an uncached report on a fresh process reads little.
`close` stores the rollups of what has finished; the metrics refresh (`insights.metrics`,
every ``metrics_interval_s``) runs it. Reports are also kept for ``report_cache_s`` (default
60 s; a business or quality report per range and team, the last 64 asked for). A review
scored here drops the kept quality reports at once; another replica's within the TTL.

Every method takes the team to cut by (None: every team); the caller decides which team a
principal may read (a team admin: its own).
"""

from __future__ import annotations

import copy
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import select, update

from fleetgate.errors import InvalidRequest, NotFound
from fleetgate.insights.business import BusinessQuery, business_report
from fleetgate.insights.config import InsightsConfig
from fleetgate.insights.day_rollup import close_days
from fleetgate.insights.keys import key_report
from fleetgate.insights.marks import HOUR, bump
from fleetgate.insights.quality_cache import QualityCache
from fleetgate.insights.tables import reviews
from fleetgate.store.database import Database
from fleetgate.timespans import DAY_MS

__all__ = ["InsightsReports", "ReviewFilter"]

_BUSINESS_KEPT = 64  # business reports kept (ranges and teams asked for)


class ReviewFilter:
    """Which review items to list: of a team, an alias, scored or not (None: both)."""

    def __init__(
        self,
        team_id: str | None = None,
        alias: str | None = None,
        scored: bool | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> None:
        self.team_id, self.alias, self.scored = team_id, alias, scored
        self.limit, self.offset = limit, offset


class InsightsReports:
    def __init__(
        self,
        db: Database,
        config: Callable[[], InsightsConfig],
        aliases: Callable[[], Iterable[str]],
        clock: Callable[[], float] = time.time,
        logs_payloads: Callable[[str | None], bool] | None = None,
    ) -> None:
        self.db = db
        self._logs_payloads = logs_payloads
        self.cache = QualityCache(db, lambda: config().follow_up_s, clock=clock)
        # (start, end, team) -> (computed at, report), least recently used first
        self._business: OrderedDict[tuple[int, int, str | None], tuple[float, dict[str, Any]]]
        self._business = OrderedDict()
        self._config = config
        self._aliases = aliases
        self.clock = clock

    @property
    def config(self) -> InsightsConfig:
        return self._config()

    async def business(
        self, start: int, end: int, team_id: str | None, *, fresh: bool = False
    ) -> dict[str, Any]:
        """`insights.business.business_report` for the days ``[start, end]``: a copy computed
        at most ``report_cache_s`` ago (``fresh``: computed now, and kept)."""
        config = self._config()
        key = (start, end, team_id)
        now = self.clock()
        held = self._business.get(key)
        if not fresh and held is not None and now - held[0] <= config.report_cache_s:
            self._business.move_to_end(key)
            return copy.deepcopy(held[1])
        async with self.db.engine.connect() as conn:
            report = await business_report(
                conn,
                BusinessQuery(start, end, team_id),
                paid=config.paid_plans,
                revenue_usd_month=config.revenue_usd_month,
            )
        if config.report_cache_s > 0:
            self._business[key] = (now, copy.deepcopy(report))
            self._business.move_to_end(key)
            while len(self._business) > _BUSINESS_KEPT:
                self._business.popitem(last=False)
        return report

    async def close(self, budget_s: float = 20.0) -> tuple[int, int]:
        """Store the rollups of the days and hours that are over and written to since (each
        within ``budget_s``, newest first); how many days and hours were stored."""
        last_day = int((self.clock() - self.cache.settle_s) // 86_400) - 1
        days = await close_days(self.db, last_day, budget_s=budget_s)
        hours = await self.cache.close(budget_s=budget_s)
        return days, hours

    async def quality(
        self, start_ms: int, end_ms: int, team_id: str | None
    ) -> list[dict[str, Any]]:
        """`insights.quality.quality_report` for the whole UTC days ``[start_ms, end_ms)``
        (closed hours from their rollups: `QualityCache`)."""
        self.cache.ttl_s = self._config().report_cache_s
        return await self.cache.report(start_ms // DAY_MS, (end_ms - 1) // DAY_MS, team_id)

    async def keys(self, days: int, team_id: str | None) -> list[dict[str, Any]]:
        """`insights.keys.key_report` as of now."""
        async with self.db.engine.connect() as conn:
            return await key_report(
                conn,
                now_ms=int(self.clock() * 1000),
                days=days,
                aliases=self._aliases(),
                team_id=team_id,
            )

    async def reviews(self, which: ReviewFilter) -> list[dict[str, Any]]:
        """Review items, oldest first; an item whose team no longer logs payloads comes without
        its prompt and answer (``payload_withheld``: true)."""
        query = (
            select(reviews)
            .order_by(reviews.c.created_ms, reviews.c.request_id)
            .limit(which.limit)
            .offset(which.offset)
        )
        if which.team_id is not None:
            query = query.where(reviews.c.team_id == which.team_id)
        if which.alias:
            query = query.where(reviews.c.alias == which.alias)
        if which.scored is not None:
            column = reviews.c.score
            query = query.where(column.is_not(None) if which.scored else column.is_(None))
        async with self.db.engine.connect() as conn:
            # str(): column names are a str subclass, which orjson refuses as a key
            rows = [
                {str(k): v for k, v in r._mapping.items()}
                for r in (await conn.execute(query)).all()
            ]
        logs = self._logs_payloads
        for row in rows:
            row["payload_withheld"] = logs is not None and not logs(row["team_id"] or None)
            if row["payload_withheld"]:
                row["prompt"] = row["response"] = None
        return rows

    def check_scores(self, scores: Any) -> dict[str, int]:
        """``scores`` if it gives each rubric criterion a whole number from 1 to 5, else 400."""
        rubric = self._config().review_rubric
        if (
            not isinstance(scores, dict)
            or set(scores) != set(rubric)
            or not all(type(v) is int and 1 <= v <= 5 for v in scores.values())
        ):
            raise InvalidRequest(
                f"'scores' must give each of {', '.join(rubric)} a whole number from 1 to 5.",
                param="scores",
            )
        return {str(k): int(v) for k, v in scores.items()}

    async def score(
        self, request_id: str, scores: dict[str, int], reviewer: str, team_id: str | None
    ) -> float:
        """Store a review item's rubric ``scores`` (checked by `check_scores`) and their mean;
        404 for an item that is not there (or not of ``team_id``)."""
        where = [reviews.c.request_id == request_id]
        if team_id is not None:
            where.append(reviews.c.team_id == team_id)
        mean = sum(scores.values()) / len(scores)
        async with self.db.engine.begin() as conn:
            done = await conn.execute(
                update(reviews).where(*where).values(
                    scores=scores, score=mean, reviewer=reviewer[:40],
                    scored_ms=int(self.clock() * 1000),
                ).returning(reviews.c.created_ms)
            )  # fmt: skip
            hours = {int(ms) // 3_600_000 for (ms,) in done.all()}
            await bump(conn, self.db.dialect, HOUR, hours)  # its hour's rollup is not current
        if not hours:
            raise NotFound(f"No review item '{request_id}'.", param="request_id")
        self.cache.invalidate()  # the quality report shows it at once (here; elsewhere: ttl_s)
        return mean
