"""Metric and label names read out of PromQL."""

from __future__ import annotations

from fleetgate.telemetry.monitoring.promql import names


def test_functions_keywords_strings_and_ranges_are_not_metrics() -> None:
    found = names(
        'sum by (alias) (rate(fleetgate_requests_total{status=~"5..",alias!="x"}[5m])) '
        "/ on (alias) group_left sum by (alias) (rate(fleetgate_requests_total[1h])) > 1e-3"
    )
    assert found.metrics == {"fleetgate_requests_total"}
    assert found.labels == {"alias", "status"}


def test_colons_and_bare_selectors() -> None:
    found = names("vllm:kv_cache_usage_perc > 0.9 and up == 0")
    assert found.metrics == {"vllm:kv_cache_usage_perc", "up"}
    assert names("histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))").labels == {"le"}
