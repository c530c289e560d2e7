"""Every dashboard query and alert rule names a metric that something really exports.

A gateway (with tenancy, safety, scheduling, multimodal and insights on) serves one request
from a vLLM-named engine simulator; both /metrics pages are scraped, and every metric a query
selects must be on one of them, or among DCGM-exporter's default GPU counters.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from fleetgate.cli.monitoring import WORDS_ONLY, metric_catalog
from fleetgate.sim import SimConfig, running_sim
from fleetgate.telemetry.monitoring.alerts import ALERTS
from fleetgate.telemetry.monitoring.catalog import DCGM_METRICS, Catalog, MetricInfo
from fleetgate.telemetry.monitoring.dashboards import LAYERS
from fleetgate.telemetry.monitoring.promql import names
from tests.conftest import AUTH

QUERIES = [expr for _, panels in LAYERS.values() for p in panels for expr, _ in p.queries]
QUERIES += [a.expr for a in ALERTS]


def _scraped(text: str, source: str) -> list[MetricInfo]:
    out = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            out.append(MetricInfo(name, kind, "", frozenset(), source))
    return out


async def test_every_query_names_an_exported_metric(gateway: Any) -> None:
    async with running_sim(SimConfig()) as sim_url, aiohttp.ClientSession() as http:
        config = {
            "models": [
                {"alias": "a", "deployments": [{"model": "tiny", "api_base": f"{sim_url}/v1"}]}
            ],
            "safety": WORDS_ONLY,
            "insights": {},  # its gauges feed the quality and business layers
        }
        client = await gateway(config)
        body = {"model": "a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
        assert resp.status == 200, await resp.text()
        gateway_text = await (await client.get("/metrics", headers=AUTH)).text()
        async with http.get(f"{sim_url}/metrics") as sim_resp:
            engine_text = await sim_resp.text()
    exported = Catalog(
        _scraped(gateway_text, "gateway")
        + [m for m in _scraped(engine_text, "vllm") if m.name.startswith("vllm:")]
        + [MetricInfo(n, "gauge", "", frozenset(), "dcgm") for n in DCGM_METRICS]
    )
    missing = {
        series: expr
        for expr in QUERIES
        for series in names(expr).metrics
        if exported.family(series) is None
    }
    assert missing == {}
    used = {exported.family(s).source for e in QUERIES for s in names(e).metrics}  # type: ignore[union-attr]
    assert used == {"gateway", "vllm", "dcgm"}


def test_registry_catalog_accepts_every_query_with_its_labels() -> None:
    catalog = metric_catalog()
    assert {q: catalog.problems(q) for q in QUERIES if catalog.problems(q)} == {}


def test_catalog_refuses_unknown_metrics_and_labels() -> None:
    catalog = metric_catalog()
    assert catalog.problems("rate(fleetgate_requests_totl[5m])") == [
        "unknown metric 'fleetgate_requests_totl' in: rate(fleetgate_requests_totl[5m])"
    ]
    bad_label = "sum by (team) (fleetgate_tokens_total)"
    assert catalog.problems(bad_label) == [
        f"label 'team' is on none of the metrics of: {bad_label}"
    ]
    assert catalog.problems("vllm:gpu_cache_usage_perc")  # vLLM v0's name, gone in v1
    assert catalog.problems("1 + 1") == ["names no metric: 1 + 1"]
    with pytest.raises(ValueError, match="unknown metric"):
        catalog.check("up == 0")
    assert catalog.family("fleetgate_ttft_seconds_bucket") is not None
    assert catalog.family("fleetgate_requests_total_bucket") is None  # a counter has no buckets
