"""The four Grafana dashboards (infrastructure, application, quality, business).

Each panel is one or more PromQL queries; :func:`dashboards` checks every query against a
:class:`Catalog` and takes the panel's description from the HELP text of the metric it shows,
so the JSON follows the registry. Queries use ``$__rate_interval`` and a ``datasource``
variable, as Grafana's provisioning expects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetgate.telemetry.monitoring.catalog import Catalog
from fleetgate.telemetry.monitoring.promql import names

__all__ = ["LAYERS", "Panel", "dashboards"]

_R = "$__rate_interval"


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"


def _q(quantile: float, histogram: str, by: str = "alias") -> str:
    return f"histogram_quantile({quantile}, sum by ({by}, le) (rate({histogram}_bucket[{_R}])))"


def _p(name: str, histogram: str, unit: str = "s", by: str = "alias") -> Panel:
    return Panel(
        name,
        tuple((_q(q, histogram, by), f"p{int(q * 100)} {{{{{by}}}}}") for q in (0.5, 0.95, 0.99)),
        unit,
    )


INFRASTRUCTURE = (
    Panel("GPU utilisation", (("avg by (Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL)",
                               "{{Hostname}} GPU {{gpu}}"),), "percent"),
    Panel("GPU memory used", (("sum by (Hostname, gpu) (DCGM_FI_DEV_FB_USED) / sum by "
                               "(Hostname, gpu) (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
                               "{{Hostname}} GPU {{gpu}}"),), "percentunit"),
    Panel("GPU power", (("sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)", "{{Hostname}}"),),
          "watt"),
    Panel("GPU temperature", (("max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP)",
                               "{{Hostname}} GPU {{gpu}}"),), "celsius"),
    Panel("Engine requests running / waiting", (
        ("sum by (model_name) (vllm:num_requests_running)", "running {{model_name}}"),
        ("sum by (model_name) (vllm:num_requests_waiting)", "waiting {{model_name}}"),
    )),
    Panel("Engine KV-cache usage", (("max by (model_name, instance) (vllm:kv_cache_usage_perc)",
                                     "{{model_name}} {{instance}}"),), "percentunit"),
    Panel("Engine preemptions", ((f"sum by (model_name) (rate(vllm:num_preemptions_total[{_R}]))",
                                  "{{model_name}}"),), "ops"),
    Panel("Engine queue time p95", ((
        _q(0.95, "vllm:request_queue_time_seconds", "model_name"), "{{model_name}}"),), "s"),
    Panel("Deployments in rotation", (("sum by (alias) (fleetgate_deployment_healthy)",
                                       "{{alias}}"),)),
    Panel("Gateway in-flight requests", (("sum by (alias) (fleetgate_in_flight_requests)",
                                          "{{alias}}"),)),
    Panel("Admission queue depth", (("sum by (pool, band) (fleetgate_scheduling_queue_depth)",
                                     "{{pool}} {{band}}"),)),
    Panel("Admitted vs limit", (
        ("sum by (pool) (fleetgate_scheduling_admitted)", "admitted {{pool}}"),
        ("sum by (pool) (fleetgate_scheduling_limit)", "limit {{pool}}"),
    )),
)  # fmt: skip

APPLICATION = (
    Panel("Requests by status", ((f"sum by (alias, status) (rate(fleetgate_requests_total[{_R}]))",
                                  "{{alias}} {{status}}"),), "reqps"),
    Panel("Error responses by type", ((
        f"sum by (status, type) (rate(fleetgate_errors_total[{_R}]))", "{{status}} {{type}}"),),
        "reqps"),
    _p("Time to first token", "fleetgate_ttft_seconds"),
    _p("Inter-token latency", "fleetgate_inter_token_latency_seconds"),
    _p("Time per output token", "fleetgate_time_per_output_token_seconds"),
    _p("End-to-end latency", "fleetgate_request_duration_seconds"),
    _p("Gateway overhead", "fleetgate_overhead_seconds"),
    Panel("Output tokens per second", ((
        f'sum by (alias) (rate(fleetgate_tokens_total{{direction="output"}}[{_R}]))',
        "{{alias}}"),)),
    Panel("Prefix-cache hit rate (expected by routing, measured by engines)", (
        ("avg by (alias) (fleetgate_routing_prefix_hit_ratio)", "expected {{alias}}"),
        (f"sum by (model_name) (rate(vllm:prefix_cache_hits_total[{_R}])) / sum by (model_name) "
         f"(rate(vllm:prefix_cache_queries_total[{_R}]))", "engine {{model_name}}"),
    ), "percentunit"),
    Panel("Retries, fallbacks, cooldowns", (
        (f"sum by (alias, reason) (rate(fleetgate_retries_total[{_R}]))", "retry {{alias}} "
         "{{reason}}"),
        (f"sum by (alias, fallback) (rate(fleetgate_fallbacks_total[{_R}]))",
         "fallback {{alias}} -> {{fallback}}"),
        (f"sum by (alias) (rate(fleetgate_cooldowns_total[{_R}]))", "cooldown {{alias}}"),
    ), "ops"),
    _p("Admission queue wait", "fleetgate_scheduling_queue_wait_seconds", by="pool"),
    Panel("Client disconnects", ((
        f"sum by (alias) (rate(fleetgate_client_disconnects_total[{_R}]))", "{{alias}}"),), "ops"),
)  # fmt: skip


def _by_version(title: str, ratio: str, unit: str = "percentunit") -> Panel:
    """A per-alias-and-version figure the insights feature refreshes from the database (each
    process reports the same value: ``max`` over processes)."""
    return Panel(title, ((f"max by (alias, version) (fleetgate_insights_{ratio})",
                          "{{alias}} {{version}}"),), unit)  # fmt: skip


ANSWERS = (
    _by_version("Abandoned streams (cut, no follow-up), last 7 days", "abandonment_ratio"),
    _by_version("Regenerations, last 7 days", "regeneration_ratio"),
    _by_version("Positive feedback share, last 7 days", "feedback_positive_ratio"),
    _by_version("Code answers adopted (accepted or edited), last 7 days", "adoption_ratio"),
    _by_version("Hallucination estimate (sampled RAG answers), last 7 days",
                "hallucination_ratio"),
    _by_version("Mean human review score (1-5), last 7 days", "review_score", "short"),
    Panel("Feedback and adoption events", ((
        f"sum by (alias, event) (rate(fleetgate_insights_events_total[{_R}]))",
        "{{alias}} {{event}}"),), "ops"),
    Panel("Human review queue", (("max by (state) (fleetgate_insights_review_items)",
                                  "{{state}}"),)),
)  # fmt: skip

QUALITY = (
    *ANSWERS,
    Panel("Guardrail verdicts", ((
        f"sum by (stage, check, action) (rate(fleetgate_safety_verdicts_total[{_R}]))",
        "{{stage}} {{check}} {{action}}"),), "ops"),
    Panel("Blocked share of requests", ((
        f'sum(rate(fleetgate_safety_verdicts_total{{action="block"}}[{_R}])) / '
        f"sum(rate(fleetgate_requests_total[{_R}]))", "blocked"),), "percentunit"),
    Panel("Guardrail check errors", ((
        f"sum by (stage, check) (rate(fleetgate_safety_check_errors_total[{_R}]))",
        "{{stage}} {{check}}"),), "ops"),
    Panel("Streams stopped by moderation", ((
        f"sum by (check) (rate(fleetgate_safety_stream_stops_total[{_R}]))", "{{check}}"),), "ops"),
    Panel("Audit violations by category", ((
        "sum by (category) (increase(fleetgate_safety_audit_violations_total[1h]))",
        "{{category}}"),)),
    Panel("Keys suspended", (("sum(increase(fleetgate_safety_key_suspensions_total[1h]))",
                              "suspended"),)),
    Panel("Audit queue", (
        ("sum(fleetgate_safety_audit_queue_depth)", "queued"),
        (f"sum(rate(fleetgate_safety_audit_shed_total[{_R}]))", "shed/s"),
    )),
)  # fmt: skip

USERS = (
    Panel("Active end users", (
        ("max(fleetgate_insights_daily_active_users)", "daily (today)"),
        ("max(fleetgate_insights_monthly_active_users)", "monthly (30 days)"),
    )),
    Panel("Stickiness (DAU/MAU) and conversion", (
        ("max(fleetgate_insights_stickiness_ratio)", "stickiness"),
        ("max(fleetgate_insights_conversion_ratio)", "free-to-paid conversion"),
    ), "percentunit"),
    Panel("Retention by day N (cohorts of the last 30 days)", ((
        "max by (day) (fleetgate_insights_retention_ratio)", "day {{day}}"),), "percentunit"),
    Panel("Active end users by plan, last 30 days", ((
        "max by (plan) (fleetgate_insights_plan_active_users)", "{{plan}}"),)),
    Panel("Cost and revenue by plan, last 30 days", (
        ("max by (plan) (fleetgate_insights_plan_cost_usd)", "cost {{plan}}"),
        ("max by (plan) (fleetgate_insights_plan_revenue_usd)", "revenue {{plan}}"),
    ), "currencyUSD"),
    Panel("Cost per unit of revenue by plan, last 30 days", ((
        "max by (plan) (fleetgate_insights_plan_cost_usd) / "
        "max by (plan) (fleetgate_insights_plan_revenue_usd)", "{{plan}}"),), "percentunit"),
    Panel("Insights rows not yet stored", (
        ("sum(fleetgate_insights_pending_rows)", "pending"),
        ("sum(fleetgate_insights_dropped_rows)", "dropped since start"),
    )),
)  # fmt: skip

BUSINESS = (
    *USERS,
    Panel("Spend per hour by team and alias", ((
        "sum by (team, alias) (increase(fleetgate_spend_usd_total[1h]))",
        "{{team}} {{alias}}"),), "currencyUSD"),
    Panel("Cost per request by team and alias", ((
        "sum by (team, alias) (increase(fleetgate_spend_usd_total[1h])) / sum by (team, alias) "
        "(increase(fleetgate_team_requests_total[1h]))", "{{team}} {{alias}}"),), "currencyUSD"),
    Panel("Tokens per hour by alias", ((
        "sum by (alias, direction) (increase(fleetgate_tokens_total[1h]))",
        "{{alias}} {{direction}}"),)),
    Panel("Requests per hour by alias and version", ((
        "sum by (alias, version) (increase(fleetgate_requests_total[1h]))",
        "{{alias}} {{version}}"),)),
    Panel("Budget left by team", (("min by (team) (fleetgate_team_budget_remaining_usd)",
                                   "{{team}}"),), "currencyUSD"),
    Panel("Queued requests by team", ((
        f"sum by (team) (rate(fleetgate_scheduling_queued_total[{_R}]))", "{{team}}"),), "reqps"),
    Panel("Requests shed by team", ((
        f"sum by (team, reason) (rate(fleetgate_scheduling_sheds_total[{_R}]))",
        "{{team}} {{reason}}"),), "reqps"),
    Panel("Spend records not yet stored", (
        ("sum(fleetgate_spend_pending_records)", "pending"),
        (f"sum(rate(fleetgate_spend_dropped_total[{_R}]))", "dropped/s"),
    )),
)  # fmt: skip

LAYERS: dict[str, tuple[str, tuple[Panel, ...]]] = {
    "infrastructure": ("fleetgate: infrastructure (engines and GPUs)", INFRASTRUCTURE),
    "application": ("fleetgate: application (latency, throughput, cache)", APPLICATION),
    "quality": ("fleetgate: quality (answers, reviews and guardrails)", QUALITY),
    "business": (
        "fleetgate: business (users, plans, cost against revenue, usage and budgets)",
        BUSINESS,
    ),
}


def _panel(panel: Panel, index: int, catalog: Catalog) -> dict[str, Any]:
    helps = []
    for expr, _ in panel.queries:
        catalog.check(expr)
        for series in sorted(names(expr).metrics):
            info = catalog.family(series)
            if info is not None and info.help not in helps:
                helps.append(info.help)
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": panel.title,
        "description": " ".join(helps),
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def dashboards(catalog: Catalog) -> dict[str, dict[str, Any]]:
    """Grafana dashboard JSON by layer name; ValueError if a query names an unknown metric."""
    out: dict[str, dict[str, Any]] = {}
    for layer, (title, panels) in LAYERS.items():
        out[layer] = {
            "uid": f"fleetgate-{layer}",
            "title": title,
            "tags": ["fleetgate", layer],
            "schemaVersion": 39,
            "version": 1,
            "editable": True,
            "time": {"from": "now-6h", "to": "now"},
            "refresh": "30s",
            "templating": {
                "list": [
                    {
                        "name": "datasource",
                        "type": "datasource",
                        "query": "prometheus",
                        "label": "Prometheus",
                    }
                ]
            },  # fmt: skip
            "panels": [_panel(p, i, catalog) for i, p in enumerate(panels)],
        }
    return out
