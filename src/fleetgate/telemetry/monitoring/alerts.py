"""Prometheus alert rules: SLO burn rates, budgets, engines, cooldowns, the spool, the limiter.

The SLOs (docs/operations.md, "Dashboards and alerts") are the seeds' by default (Q1), per
alias: 95% of first tokens within 1 s (TTFT P95 < 1 s), 95% of output tokens within 50 ms of
the one before (TPOT P95 < 50 ms), 99.9% of requests without a 5xx; `Slos` changes them
(``fleetgate monitoring export --ttft-p95-s ...``). Burn-rate alerts follow the multi-window
scheme of the Google SRE workbook: page when the error budget burns 14.4 times too fast over
1 h (confirmed over 5 min), open a ticket at 6 times over 6 h (confirmed over 30 min). Every
expression is checked against the :class:`Catalog`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetgate.telemetry.metrics import TOKEN_BUCKETS
from fleetgate.telemetry.monitoring.catalog import Catalog
from fleetgate.telemetry.registry import DEFAULT_LATENCY_BUCKETS

__all__ = ["ALERTS", "Alert", "Slos", "alerts", "prometheus_rule", "rules"]

_BURN = {"fast": (14.4, "1h", "5m", "critical", "2m"), "slow": (6.0, "6h", "30m", "warning", "15m")}


def _le(bound: float) -> str:
    """A bucket bound as the ``le`` label renders it (1.0 -> "1", 0.05 -> "0.05")."""
    return str(int(bound)) if bound == int(bound) else repr(float(bound))


@dataclass(frozen=True)
class Slos:
    """The service-level objectives the burn-rate alerts guard (the seeds' Q1 by default)."""

    ttft_s: float = 1.0  # time to first token ...
    ttft: float = 0.95  # ... met by this share of requests (P95)
    tpot_s: float = 0.05  # time per output token ...
    tpot: float = 0.95  # ... met by this share of tokens (P95)
    availability: float = 0.999  # share of requests without a 5xx

    def __post_init__(self) -> None:
        for name, bound, buckets in (("ttft_s", self.ttft_s, DEFAULT_LATENCY_BUCKETS),
                                     ("tpot_s", self.tpot_s, TOKEN_BUCKETS)):  # fmt: skip
            if bound not in buckets:
                raise ValueError(f"{name} {bound}: must be a bucket bound of its histogram, "
                                 f"one of {', '.join(map(_le, buckets))}")  # fmt: skip
        for name in ("ttft", "tpot", "availability"):
            if not 0.5 <= getattr(self, name) < 1:
                raise ValueError(f"{name}: a share between 0.5 and 1 (exclusive)")


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str


def _slow_share(histogram: str, bound: float, window: str) -> str:
    """Share of observations over ``bound`` per alias (1 - the bucket's share)."""
    return (
        f'(1 - sum by (alias) (rate({histogram}_bucket{{le="{_le(bound)}"}}[{window}]))'
        f" / sum by (alias) (rate({histogram}_count[{window}])))"
    )


def _errors_bad(window: str) -> str:
    return (
        f'(sum by (alias) (rate(fleetgate_requests_total{{status=~"5.."}}[{window}]))'
        f" / sum by (alias) (rate(fleetgate_requests_total[{window}])))"
    )


def _burn_alerts(slos: Slos) -> list[Alert]:
    latency = (
        ("TTFT", "fleetgate_ttft_seconds", slos.ttft_s, slos.ttft, "time to first token",
         "first tokens"),
        ("TPOT", "fleetgate_time_per_output_token_seconds", slos.tpot_s, slos.tpot,
         "time per output token", "output tokens"),
    )  # fmt: skip
    out = []
    for speed, (factor, long, short, severity, for_) in _BURN.items():
        for key, histogram, bound, target, what, items in latency:
            limit = round(factor * (1 - target), 6)
            out.append(Alert(
                f"Fleetgate{key}BudgetBurn{speed.title()}",
                f"{_slow_share(histogram, bound, long)} > {limit} and "
                f"{_slow_share(histogram, bound, short)} > {limit}",
                for_, severity,
                "{{ $labels.alias }}: " f"{what} burns its SLO budget {factor}x too fast",
                f"More than {limit:.2%} of {items} took over {_le(bound)}s over {long} and "
                f"{short} (SLO: P{target * 100:g} < {_le(bound)}s).",
            ))  # fmt: skip
        err = round(factor * (1 - slos.availability), 6)
        out.append(Alert(
            f"FleetgateErrorBudgetBurn{speed.title()}",
            f"{_errors_bad(long)} > {err} and {_errors_bad(short)} > {err}",
            for_, severity,
            "{{ $labels.alias }}: 5xx responses burn the error budget " f"{factor}x too fast",
            f"More than {err:.2%} of requests failed with a 5xx over {long} and {short} "
            f"(SLO: {slos.availability:.1%} succeed).",
        ))  # fmt: skip
    return out


def alerts(slos: Slos) -> tuple[Alert, ...]:
    """Every alert rule, the burn-rate ones for ``slos``."""
    return (*_burn_alerts(slos), *_OTHER)


_OTHER: tuple[Alert, ...] = (
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

ALERTS = alerts(Slos())
"""The rules with the default (the seeds') SLOs."""


def rules(catalog: Catalog, slos: Slos | None = None) -> dict[str, Any]:
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
                    for a in (ALERTS if slos is None else alerts(slos))
                ],
            }
        ]
    }


def prometheus_rule(catalog: Catalog, slos: Slos | None = None) -> dict[str, Any]:
    """The same rules as a Prometheus Operator ``PrometheusRule`` object."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "fleetgate"},
        "spec": rules(catalog, slos),
    }
