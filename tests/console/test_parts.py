"""The console's parts on their own: redirects, group mapping, forms, chart, CSV."""

from __future__ import annotations

import pytest

from fleetgate.console.charts import bar_chart
from fleetgate.console.config import OidcConfig
from fleetgate.console.forms import page_number, service_body
from fleetgate.console.login import safe_next
from fleetgate.console.oidc import map_groups
from fleetgate.errors import InvalidRequest


@pytest.mark.parametrize(
    "value, ok",
    [("/ui/teams?page=2", True), ("https://evil.example/ui/", False), ("//evil/ui/", False),
     ("/ui/x\r\nSet-Cookie: a=b", False), ("/admin/keys", False), ("", False)],
)  # fmt: skip
def test_sign_in_only_returns_to_console_paths(value: str | None, ok: bool) -> None:
    assert (safe_next(value) is not None) is ok


def test_groups_map_to_the_strongest_role_then_a_team() -> None:
    config = OidcConfig(
        issuer="https://idp", client_id="c",
        roles={"ops": "master", "money": "finance_viewer"}, teams={"s-admins": "search"},
    )  # fmt: skip
    assert map_groups(config, ["money", "ops"]) == ("master", None)
    assert map_groups(config, ["s-admins", "money"]) == ("finance_viewer", None)
    assert map_groups(config, ["x", "s-admins"]) == ("team_admin", "search")
    assert map_groups(config, ["x"]) is None


def test_forms_become_service_bodies_or_400s() -> None:
    body = service_body(
        {"rpm": "60", "max_budget_usd": "2.5", "tags": "env=prod, app=x", "aliases": "a, b",
         "name": " n "},
        "name", "aliases",
    )  # fmt: skip
    assert body["rpm"] == 60 and body["tpm"] is None and body["max_budget_usd"] == 2.5
    assert body["tags"] == {"env": "prod", "app": "x"} and body["aliases"] == ["a", "b"]
    assert body["name"] == "n"
    for bad in ({"rpm": "-1"}, {"rpm": "1e3"}, {"max_budget_usd": "lots"}, {"tags": "novalue"}):
        with pytest.raises(InvalidRequest):
            service_body(bad)
    assert page_number("3") == 3 and page_number(None) == 1
    with pytest.raises(InvalidRequest):
        page_number("0")


def test_the_chart_escapes_labels_and_scales_bars_to_the_largest() -> None:
    svg = bar_chart("spend", [("<script>", 1.0), ("b", 4.0)], "$")
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert 'width="460.0"' in svg and 'width="115.0"' in svg
    assert "No data" in bar_chart("empty", [])


def test_the_overview_window_reports_the_last_hour_by_alias() -> None:
    from fleetgate.console.overview import MetricWindow
    from fleetgate.telemetry.metrics import GatewayMetrics

    metrics = GatewayMetrics()
    now = [0.0]
    window = MetricWindow(metrics, clock=lambda: now[0])
    metrics.requests.labels("tiny", "tiny/0", "v1", "200").inc(5)  # before the window
    window.tick()
    now[0] = 100.0
    metrics.requests.labels("tiny", "tiny/0", "v1", "200").inc(8)
    metrics.requests.labels("tiny", "tiny/0", "v1", "502").inc(2)
    metrics.ttft.labels("tiny", "tiny/0", "v1").observe(0.2)
    metrics.ttft.labels("tiny", "tiny/0", "v1").observe(0.4)
    (row,) = window.by_alias()
    assert row["requests"] == 10 and row["rps"] == pytest.approx(0.1)
    assert row["error_rate"] == pytest.approx(0.2) and row["ttft_ms"] == pytest.approx(300)
    now[0] = 3700.0
    window.tick()  # the first sample left the hour
    assert window.by_alias()[0]["requests"] == 0
