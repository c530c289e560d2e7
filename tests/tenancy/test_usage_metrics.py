"""Spend and requests per team and alias on /metrics agree with the spend report."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from tests.procs import metric_value
from tests.tenancy.support import running_gateway


async def test_spend_counters_match_the_report(upstream: str, tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'fleetgate.db'}"
    async with running_gateway(upstream, tmp_path, db_url) as gw:
        _, _, red = await gw.team_and_key("red")
        _, _, blue = await gw.team_and_key("blue")
        for i in range(6):
            status, _, _ = await gw.chat(red if i % 3 else blue, max_tokens=4 + i)
            assert status == 200
        status, _, _ = await gw.chat(blue, alias="other")  # no price: requests, no spend
        assert status == 200
        await gw.tenancy.writer.flush()
        _, report = await gw.admin("GET", "/admin/spend?group_by=team,alias")
        async with gw.session.get(gw.url + "/metrics") as resp:
            text = await resp.text()
    for row in report["data"]:
        team, alias = row["team_name"], row["alias"]
        requests = metric_value(text, "fleetgate_team_requests_total", team=team, alias=alias)
        assert requests == row["requests"], row
        usd = Decimal(row["spend_nusd"]) / Decimal(10**9)
        if usd:
            spent = metric_value(text, "fleetgate_spend_usd_total", team=team, alias=alias)
            assert abs(Decimal(str(spent)) - usd) < Decimal("0.000000001") * row["requests"]
        else:
            assert f'fleetgate_spend_usd_total{{team="{team}",alias="{alias}"}}' not in text
    assert {(r["team_name"], r["alias"]) for r in report["data"]} == {
        ("red", "tiny"),
        ("blue", "tiny"),
        ("blue", "other"),
    }
