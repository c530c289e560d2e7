"""`InsightsMetrics`: the quality and business layers as Prometheus metrics, for the dashboards.

Business and quality figures live in the database, so they are gauges refreshed on a timer
(``insights.metrics_interval_s``, default 60 s) from the rollups and the quality cache, not
computed per scrape: each refresh first closes the days and hours that are over (their
rollups, stored once for every replica: `InsightsReports.close`), then computes one business
report over the last 30 days and one quality report over the last 7 (closed days and hours
from the rollups, the rest of today from the requests) and one count of the review queue,
whatever the traffic. Each gauge carries a ``process``
label (host:pid): every process reports the same figure, so a dashboard takes ``max`` over
processes (a worker's figures merged with others' are never added up into a wrong one).

Counters that follow traffic directly (events posted, rows dropped) are per process and add
up as usual.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select

from fleetgate.insights.business import RETENTION_DAYS
from fleetgate.insights.reports import InsightsReports
from fleetgate.insights.tables import reviews
from fleetgate.insights.writer import InsightsWriter
from fleetgate.tasks import periodic
from fleetgate.telemetry.registry import Registry

__all__ = ["QUALITY_DAYS", "InsightsMetrics"]

log = logging.getLogger("fleetgate.insights")

QUALITY_DAYS = 7  # the quality gauges cover the last 7 UTC days (today included)
_RATIOS = (
    ("abandonment_rate", "fleetgate_insights_abandonment_ratio",
     "Share of streamed requests the client cut with no follow-up, last 7 days."),
    ("regeneration_rate", "fleetgate_insights_regeneration_ratio",
     "Share of requests that repeat the previous message of their conversation, last 7 days."),
    ("feedback_positive_rate", "fleetgate_insights_feedback_positive_ratio",
     "Share of feedback events that are positive, answers of the last 7 days."),
    ("adoption_rate", "fleetgate_insights_adoption_ratio",
     "Share of code answers accepted or edited (not rejected), last 7 days."),
    ("hallucination_rate", "fleetgate_insights_hallucination_ratio",
     "Estimated hallucination rate: sampled RAG answers scored not grounded, last 7 days."),
    ("review_score", "fleetgate_insights_review_score",
     "Mean human review score (1-5) of sampled answers, last 7 days."),
)  # fmt: skip


class InsightsMetrics:
    def __init__(
        self,
        registry: Registry,
        reports: InsightsReports,
        writer: InsightsWriter,
        interval_s: Callable[[], float],
    ) -> None:
        self._reports = reports
        self._interval_s = interval_s
        self.process = f"{socket.gethostname()}:{os.getpid()}"
        p = ("process",)
        r = registry
        self.dau = r.gauge(
            "fleetgate_insights_daily_active_users", "End users with a request today (UTC).", p
        )
        self.mau = r.gauge(
            "fleetgate_insights_monthly_active_users",
            "End users with a request in the last 30 days.",
            p,
        )
        self.stickiness = r.gauge(
            "fleetgate_insights_stickiness_ratio",
            "Mean daily active users over the last 30 days / MAU.",
            p,
        )
        self.retention = r.gauge(
            "fleetgate_insights_retention_ratio",
            "Day-N retention of the cohorts of the last 30 days.",
            ("day", *p),
        )
        self.conversion = r.gauge(
            "fleetgate_insights_conversion_ratio",
            "Free-to-paid conversion over the last 30 days.",
            p,
        )
        self.plan_users = r.gauge(
            "fleetgate_insights_plan_active_users",
            "End users active on a plan in the last 30 days.",
            ("plan", *p),
        )
        self.plan_cost = r.gauge(
            "fleetgate_insights_plan_cost_usd",
            "Cost of a plan's requests in the last 30 days, USD.",
            ("plan", *p),
        )
        self.plan_revenue = r.gauge(
            "fleetgate_insights_plan_revenue_usd",
            "Revenue of a plan's active users over the last 30 days, USD (from revenue_usd_month).",
            ("plan", *p),
        )
        self.quality = {
            key: r.gauge(name, text, ("alias", "version", *p)) for key, name, text in _RATIOS
        }
        self.queue = r.gauge(
            "fleetgate_insights_review_items",
            "Items in the human review queue, by state.",
            ("state", *p),
        )
        self.refresh_s = r.gauge(
            "fleetgate_insights_refresh_seconds",
            "How long the last refresh of these gauges took.",
            p,
        )
        self.events = r.counter(
            "fleetgate_insights_events_total",
            "Feedback and adoption events posted, by alias and event.",
            ("alias", "event"),
        )
        pending = r.gauge(
            "fleetgate_insights_pending_rows",
            "Request rows buffered for the insights tables, not yet written.",
        )
        pending.set_collector(lambda: [((), float(writer.pending()))])
        dropped = r.gauge(
            "fleetgate_insights_dropped_rows",
            "Request rows dropped since start: the buffer was full.",
        )
        dropped.set_collector(lambda: [((), float(writer.dropped))])
        self._first = True
        self._task = periodic(
            self._next, self.refresh, log, "insights: refreshing the metrics failed"
        )

    def _next(self) -> float:
        if self._first:  # the first refresh soon after start, then every interval
            self._first = False
            return min(5.0, self._interval_s())
        return self._interval_s()

    def start(self) -> None:
        self._task.start()

    async def aclose(self) -> None:
        await self._task.aclose()

    async def refresh(self) -> None:
        started = time.perf_counter()
        today = int(self._reports.clock() // 86_400)
        await self._reports.close()  # the days and hours that are over, for every replica
        business = await self._reports.business(today - 29, today, None, fresh=True)
        self._business(business)
        end_ms = (today + 1) * 86_400_000
        rows = await self._reports.quality(end_ms - QUALITY_DAYS * 86_400_000, end_ms, None)
        self._quality(rows)
        async with self._reports.db.engine.connect() as conn:
            counts = (await conn.execute(
                select(reviews.c.score.is_(None), func.count()).group_by(reviews.c.score.is_(None))
            )).all()  # fmt: skip
        by_state = {"unscored": 0.0, "scored": 0.0}
        for unscored, n in counts:
            by_state["unscored" if unscored else "scored"] += float(n)
        for state, count in by_state.items():
            self.queue.labels(state, self.process).set(count)
        self.refresh_s.labels(self.process).set(time.perf_counter() - started)

    def _business(self, report: dict[str, Any]) -> None:
        proc = self.process
        self.dau.labels(proc).set(float(report["dau"][-1]["users"]))
        self.mau.labels(proc).set(float(report["mau"]))
        self.stickiness.labels(proc).set(float(report["stickiness"] or 0.0))
        for n in RETENTION_DAYS:
            value = report["retention"][f"d{n}"]
            if value is not None:
                self.retention.labels(str(n), proc).set(float(value))
        if report["conversion"]["rate"] is not None:
            self.conversion.labels(proc).set(float(report["conversion"]["rate"]))
        for gauge in (self.plan_users, self.plan_cost, self.plan_revenue):
            gauge.clear()  # a plan with no users any more leaves the page
        for plan, figures in report["plans"].items():
            self.plan_users.labels(plan, proc).set(float(figures["active_users"]))
            self.plan_cost.labels(plan, proc).set(float(figures["cost_usd"]))
            if figures["revenue_usd"] is not None:
                self.plan_revenue.labels(plan, proc).set(float(figures["revenue_usd"]))

    def _quality(self, rows: list[dict[str, Any]]) -> None:
        for gauge in self.quality.values():
            gauge.clear()
        for row in rows:
            for key, gauge in self.quality.items():
                if row[key] is not None:
                    gauge.labels(row["alias"], row["version"] or "", self.process).set(
                        float(row[key])
                    )
