"""Prometheus alert rules: SLO burn rates, budgets, engines, cooldowns, the spool, the limiter.

The SLOs (docs/operations.md, "Dashboards and alerts"): 99% of first tokens within
``TTFT_SLO_S`` seconds and 99.5% of requests without a 5xx, per alias. Burn-rate alerts follow
the multi-window scheme of the Google SRE workbook: page when the error budget burns 14.4 times
too fast over 1 h (confirmed over 5 min), open a ticket at 6 times over 6 h (confirmed over
30 min). Every expression is checked against the :class:`Catalog`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetgate.telemetry.monitoring.catalog import Catalog

__all__ = ["ALERTS", "ERROR_SLO", "TTFT_SLO", "TTFT_SLO_S", "Alert", "prometheus_rule", "rules"]

TTFT_SLO_S = "2.5"  # a bucket bound of fleetgate_ttft_seconds, as the `le` label renders it
TTFT_SLO = 0.99
ERROR_SLO = 0.995
_BURN = {"fast": (14.4, "1h", "5m", "critical", "2m"), "slow": (6.0, "6h", "30m", "warning", "15m")}


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str


def _ttft_bad(window: str) -> str:
    return (
        f'(1 - sum by (alias) (rate(fleetgate_ttft_seconds_bucket{{le="{TTFT_SLO_S}"}}[{window}]))'
        f" / sum by (alias) (rate(fleetgate_ttft_seconds_count[{window}])))"
    )


def _errors_bad(window: str) -> str:
    return (
        f'(sum by (alias) (rate(fleetgate_requests_total{{status=~"5.."}}[{window}]))'
        f" / sum by (alias) (rate(fleetgate_requests_total[{window}])))"
    )


def _burn_alerts() -> list[Alert]:
    out = []
    for speed, (factor, long, short, severity, for_) in _BURN.items():
        ttft = round(factor * (1 - TTFT_SLO), 6)
        err = round(factor * (1 - ERROR_SLO), 6)
        out.append(Alert(
            f"FleetgateTTFTBudgetBurn{speed.title()}",
            f"{_ttft_bad(long)} > {ttft} and {_ttft_bad(short)} > {ttft}",
            for_, severity,
            "{{ $labels.alias }}: time to first token burns its SLO budget "
            f"{factor}x too fast",
            f"More than {ttft:.2%} of first tokens took over {TTFT_SLO_S}s over {long} and "
            f"{short} (SLO: {TTFT_SLO:.0%}).",
        ))  # fmt: skip
        out.append(Alert(
            f"FleetgateErrorBudgetBurn{speed.title()}",
            f"{_errors_bad(long)} > {err} and {_errors_bad(short)} > {err}",
            for_, severity,
            "{{ $labels.alias }}: 5xx responses burn the error budget " f"{factor}x too fast",
            f"More than {err:.2%} of requests failed with a 5xx over {long} and {short} "
            f"(SLO: {ERROR_SLO:.1%} succeed).",
        ))  # fmt: skip
    return out


ALERTS: tuple[Alert, ...] = (
    *_burn_alerts(),
    Alert("FleetgateTeamBudgetExhausted",
          "min by (team) (fleetgate_team_budget_remaining_usd) <= 0", "5m", "warning",
          "team {{ $labels.team }} has spent its budget",
          "Its keys get 429 budget_exceeded until the period resets or the budget is raised."),
    Alert("FleetgateTeamBudgetExhaustsSoon",
          "min by (team) (predict_linear(fleetgate_team_budget_remaining_usd[6h], 86400)) < 0 "
          "and min by (team) (fleetgate_team_budget_remaining_usd) > 0", "30m", "info",
          "team {{ $labels.team }} will run out of budget within a day at this rate",
          "Linear prediction over the last 6 hours."),
    Alert("FleetgateAliasDown", "max by (alias) (fleetgate_deployment_healthy) == 0", "1m",
          "critical", "alias {{ $labels.alias }} has no deployment in rotation",
          "Every deployment of the alias is cooling down or failing its probes: requests fail "
          "or go to fallbacks."),
    Alert("FleetgateEngineDown",
          "max by (alias, deployment) (fleetgate_deployment_healthy) == 0", "5m", "warning",
          "engine {{ $labels.deployment }} ({{ $labels.alias }}) is out of rotation",
          "No gateway replica has seen it healthy for 5 minutes."),
    Alert("FleetgateCooldownStorm",
          "sum by (alias) (increase(fleetgate_cooldowns_total[10m])) > 5", "0m", "warning",
          "{{ $labels.alias }}: more than 5 cooldowns in 10 minutes",
          "Deployments keep failing and coming back: check the engines' logs and capacity."),
    Alert("FleetgateSpendSpoolBacklog", "max by (instance) (fleetgate_spend_pending_records) "
          "> 10000", "10m", "warning",
          "{{ $labels.instance }}: spend/audit records are not reaching the database",
          "Records wait in the spool (kept on disk); check the database and "
          "fleetgate_spend_write_failures_total."),
    Alert("FleetgateSpendRecordsDropped",
          "sum by (instance) (increase(fleetgate_spend_dropped_total[10m])) > 0", "0m",
          "critical", "{{ $labels.instance }}: spend/audit records were dropped",
          "The spool failed and the memory queue was full: spend is under-counted."),
    Alert("FleetgateSpendWritesFailing",
          "sum by (instance) (increase(fleetgate_spend_write_failures_total[10m])) > 0", "10m",
          "warning", "{{ $labels.instance }}: batch writes to the database keep failing",
          "Records stay spooled and are retried."),
    Alert("FleetgateLimiterUnavailable",
          "sum by (policy) (increase(fleetgate_limiter_unavailable_total[5m])) > 0", "0m",
          "critical", "the shared limiter (Redis) is unreachable",
          "policy {{ $labels.policy }}: fail_closed answers 503, fail_open admits requests "
          "without limits."),
)  # fmt: skip


def rules(catalog: Catalog) -> dict[str, Any]:
    """The rule file (Prometheus' ``rule_files`` format); ValueError on an unknown metric."""
    return {
        "groups": [
            {
                "name": "fleetgate",
                "rules": [
                    {
                        "alert": a.name,
                        "expr": catalog.check(a.expr),
                        "for": a.for_,
                        "labels": {"severity": a.severity},
                        "annotations": {"summary": a.summary, "description": a.description},
                    }
                    for a in ALERTS
                ],
            }
        ]
    }


def prometheus_rule(catalog: Catalog) -> dict[str, Any]:
    """The same rules as a Prometheus Operator ``PrometheusRule`` object."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "fleetgate"},
        "spec": rules(catalog),
    }
