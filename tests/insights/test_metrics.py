"""The quality and business layers on /metrics: after a refresh the gauges hold the admin API's
figures (DAU, MAU, plans, review queue, quality by alias and version), the events counter
follows posted events, and every insights metric the dashboards query is on the page; the
business report is cached for ``report_cache_s`` (``fresh`` recomputes it)."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
from sqlalchemy import select

from fleetgate.api.state import GATEWAY
from fleetgate.http.serving import served
from fleetgate.insights.reports import InsightsReports
from fleetgate.insights.tables import requests
from fleetgate.insights.writer import write_rows
from fleetgate.telemetry.monitoring.dashboards import LAYERS
from fleetgate.telemetry.monitoring.promql import names
from tests.insights.test_feature import _chat, _gateway, upstream  # noqa: F401 (fixture)
from tests.insights.test_quality_cache import Clock, _row
from tests.tenancy.support import MASTER, Gateway, migrated_database, wait_for


def _value(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


async def test_gauges_hold_the_reports_figures(upstream: str, tmp_path: Path) -> None:  # noqa: F811
    app = await _gateway(upstream, tmp_path, {"review_share": {"tiny": 1.0},
                                              "plans": {"teams": {}}})  # fmt: skip
    async with served(app) as url, aiohttp.ClientSession() as session:
        gw = Gateway(url, app, session)
        _, _, key = await gw.team_and_key("loud", team_fields={"log_payloads": True})
        await _chat(gw, key, "alice", "s1")
        await _chat(gw, key, "bob", "s2")
        feature = next(f for f in app[GATEWAY].features.all if f.name == "insights")

        async def reviewed() -> bool:
            status, body = await gw.admin("GET", "/admin/insights/reviews")
            return status == 200 and len(body["data"]) == 2

        await wait_for(reviewed)
        _, reviews = await gw.admin("GET", "/admin/insights/reviews")
        item = reviews["data"][0]["request_id"]
        scores = {"scores": {"correct": 5, "helpful": 4, "safe": 3}}
        status, _ = await gw.admin("POST", f"/admin/insights/reviews/{item}", json=scores)
        assert status == 200
        await feature.metrics.refresh()
        async with session.get(
            url + "/metrics", headers={"Authorization": f"Bearer {MASTER}"}
        ) as r:
            text = await r.text()
        _, business = await gw.admin("GET", "/admin/insights/business")
        assert _value(text, "fleetgate_insights_daily_active_users") == 2.0
        assert _value(text, "fleetgate_insights_monthly_active_users") == business["mau"] == 2
        assert _value(text, "fleetgate_insights_plan_active_users", plan="free") == 2.0
        cost = _value(text, "fleetgate_insights_plan_cost_usd", plan="free")
        assert cost is not None and abs(cost - business["plans"]["free"]["cost_usd"]) < 1e-12
        assert _value(text, "fleetgate_insights_review_items", state="scored") == 1.0
        assert _value(text, "fleetgate_insights_review_items", state="unscored") == 1.0
        version = reviews["data"][0]["version"] or ""
        assert _value(text, "fleetgate_insights_review_score", alias="tiny",
                      version=version) == 4.0  # fmt: skip
        assert _value(text, "fleetgate_insights_regeneration_ratio", alias="tiny") == 0.0
        assert re.search(r'process="[^"]+:\d+"', text)
        assert _value(text, "fleetgate_insights_refresh_seconds") is not None

        # an event counts at once; every insights metric a dashboard names is exported
        rid = reviews["data"][1]["request_id"]
        async with gw.tenancy.db.engine.connect() as conn:
            response_id = (await conn.execute(
                select(requests.c.response_id).where(requests.c.request_id == rid)
            )).scalar_one()  # fmt: skip
        async with session.post(url + "/v1/insights/events",
                                json={"response_id": response_id, "event": "up"},
                                headers={"Authorization": f"Bearer {key}"}) as r:  # fmt: skip
            assert r.status == 200, await r.text()
        async with session.get(
            url + "/metrics", headers={"Authorization": f"Bearer {MASTER}"}
        ) as r:
            text = await r.text()
        wanted = {m for _, panels in LAYERS.values() for p in panels for e, _ in p.queries
                  for m in names(e).metrics if m.startswith("fleetgate_insights_")}  # fmt: skip
        assert _value(text, "fleetgate_insights_events_total", alias="tiny", event="up") == 1.0
        exported = set(re.findall(r"^# TYPE (fleetgate_insights_\w+) ", text, re.M))
        assert wanted and wanted <= exported, wanted - exported


async def test_business_reports_are_cached_for_report_cache_s(tmp_path: Path) -> None:
    from fleetgate.insights.config import InsightsConfig

    config = InsightsConfig(report_cache_s=60)
    async with migrated_database("sqlite", tmp_path) as db:
        clock = Clock(20_500 * 86_400 + 3600)
        reports = InsightsReports(db, lambda: config, lambda: ["chat"], clock=clock)
        async with db.engine.begin() as conn:
            await write_rows(db, conn, [_row(1, 20_500, 60)], ())
        assert (await reports.business(20_490, 20_500, None))["mau"] == 1
        async with db.engine.begin() as conn:
            await write_rows(db, conn, [_row(2, 20_500, 70, end_user="v")], ())
        assert (await reports.business(20_490, 20_500, None))["mau"] == 1  # cached
        assert (await reports.business(20_490, 20_500, "t"))["mau"] == 2  # another key
        clock.at += 61
        assert (await reports.business(20_490, 20_500, None))["mau"] == 2
        async with db.engine.begin() as conn:
            await write_rows(db, conn, [_row(3, 20_500, 80, end_user="w")], ())
        assert (await reports.business(20_490, 20_500, None, fresh=True))["mau"] == 3
        report = await reports.business(20_490, 20_500, None)
        report["mau"] = -1  # a caller's change never reaches the cache
        assert (await reports.business(20_490, 20_500, None))["mau"] == 3
