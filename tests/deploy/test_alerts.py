"""The alert rules, unit-tested with ``promtool test rules``: each alert fires where it should
and stays silent where it should not."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.telemetry.monitoring.alerts import ALERTS, Slos

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "monitoring" / "alerts.yaml"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian: prometheus) missing")

_DEP = 'deployment="d1",version="v1"'
# (alert, input series, eval time, label sets expected to fire: empty = silent)
CASES: list[tuple[str, dict[str, str], str, list[dict[str, str]]]] = []


def _latency(histogram: str, le: str, alias: str, good: int) -> dict[str, str]:
    """``good`` of every 100 observations per minute within the SLO's bucket ``le``."""
    return {
        f'{histogram}_bucket{{alias="{alias}",{_DEP},le="{le}"}}': f"0+{good}x400",
        f'{histogram}_count{{alias="{alias}",{_DEP}}}': "0+100x400",
    }


def _ttft(alias: str, good: int) -> dict[str, str]:
    return _latency("fleetgate_ttft_seconds", "1", alias, good)  # the seeds' P95 < 1 s


def _tpot(alias: str, good: int) -> dict[str, str]:
    return _latency("fleetgate_time_per_output_token_seconds", "0.05", alias, good)  # < 50 ms


def _requests(alias: str, ok: int, failed: int) -> dict[str, str]:
    return {
        f'fleetgate_requests_total{{alias="{alias}",{_DEP},status="200"}}': f"0+{ok}x400",
        f'fleetgate_requests_total{{alias="{alias}",{_DEP},status="502"}}': f"0+{failed}x400",
    }


# P95 SLOs: a 5% budget; fast burn pages over 72% slow, slow burn over 30%.
BURN_TTFT = {**_ttft("a", 20), **_ttft("b", 96)}  # 80% slow (fires), 4% slow (silent)
BURN_TPOT = {**_tpot("a", 20), **_tpot("b", 96)}
# 99.9% availability: fast burn pages over 1.44% failed, slow over 0.6%.
BURN_ERRORS = {**_requests("a", 95, 5), **_requests("b", 9995, 5)}  # 5% vs 0.05% failed
for speed in ("Fast", "Slow"):
    CASES += [
        (f"FleetgateTTFTBudgetBurn{speed}", BURN_TTFT, "70m", [{"alias": "a"}]),
        (f"FleetgateTTFTBudgetBurn{speed}", {**_ttft("a", 95), **_ttft("b", 100)}, "70m", []),
        (f"FleetgateTPOTBudgetBurn{speed}", BURN_TPOT, "70m", [{"alias": "a"}]),
        (f"FleetgateTPOTBudgetBurn{speed}", {**_tpot("a", 95), **_tpot("b", 100)}, "70m", []),
        (f"FleetgateErrorBudgetBurn{speed}", BURN_ERRORS, "70m", [{"alias": "a"}]),
        (f"FleetgateErrorBudgetBurn{speed}", _requests("a", 10000, 5), "70m", []),
    ]
# Between the two windows: 50% slow burns 10x (slow fires, fast does not); 1% failed burns 10x.
CASES += [
    ("FleetgateTTFTBudgetBurnSlow", _ttft("a", 50), "70m", [{"alias": "a"}]),
    ("FleetgateTTFTBudgetBurnFast", _ttft("a", 50), "70m", []),
    ("FleetgateErrorBudgetBurnSlow", _requests("a", 99, 1), "70m", [{"alias": "a"}]),
    ("FleetgateErrorBudgetBurnFast", _requests("a", 99, 1), "70m", []),
]
CASES.append(("FleetgateTTFTBudgetBurnFast", BURN_TTFT, "1m", []))  # `for` not yet reached

BUDGET = {
    'fleetgate_team_budget_remaining_usd{team="t1"}': "0x90",
    'fleetgate_team_budget_remaining_usd{team="t2"}': "50x90",
    'fleetgate_team_budget_remaining_usd{team="t3"}': "100-1x90",
}
HEALTH = {
    'fleetgate_deployment_healthy{alias="a",deployment="d1",version="v1"}': "0x20",
    'fleetgate_deployment_healthy{alias="a",deployment="d2",version="v1"}': "0x20",
    'fleetgate_deployment_healthy{alias="b",deployment="d3",version="v1"}': "1x20",
    'fleetgate_deployment_healthy{alias="b",deployment="d4",version="v1"}': "0x20",
}
CASES += [
    ("FleetgateTeamBudgetExhausted", BUDGET, "60m", [{"team": "t1"}]),
    ("FleetgateTeamBudgetExhausted", BUDGET, "2m", []),
    ("FleetgateTeamBudgetExhaustsSoon", BUDGET, "60m", [{"team": "t3"}]),
    ("FleetgateAliasDown", HEALTH, "10m", [{"alias": "a"}]),
    ("FleetgateEngineDown", HEALTH, "10m", [
        {"alias": "a", "deployment": "d1"}, {"alias": "a", "deployment": "d2"},
        {"alias": "b", "deployment": "d4"}]),
    ("FleetgateEngineDown", HEALTH, "3m", []),
    ("FleetgateCooldownStorm", {
        'fleetgate_cooldowns_total{alias="a",deployment="d1"}': "0+1x30",
        'fleetgate_cooldowns_total{alias="b",deployment="d3"}': "0+0.2x30"},
        "20m", [{"alias": "a"}]),
    ("FleetgateSpendSpoolBacklog", {
        'fleetgate_spend_pending_records{instance="p1"}': "20000x30",
        'fleetgate_spend_pending_records{instance="p2"}': "5x30"}, "20m", [{"instance": "p1"}]),
    ("FleetgateSpendSpoolBacklog", {
        'fleetgate_spend_pending_records{instance="p1"}': "20000x30"}, "5m", []),
    ("FleetgateSpendRecordsDropped", {
        'fleetgate_spend_dropped_total{instance="p1"}': "0x10 1x10",
        'fleetgate_spend_dropped_total{instance="p2"}': "0x20"}, "15m", [{"instance": "p1"}]),
    ("FleetgateSpendRecordsDropped", {
        'fleetgate_spend_dropped_total{instance="p1"}': "0x10 1x30"}, "35m", []),
    ("FleetgateSpendWritesFailing", {
        'fleetgate_spend_write_failures_total{instance="p1"}': "0+1x40",
        'fleetgate_spend_write_failures_total{instance="p2"}': "0x40"},
        "30m", [{"instance": "p1"}]),
    ("FleetgateLimiterUnavailable", {
        'fleetgate_limiter_unavailable_total{policy="fail_closed"}': "0+1x20",
        'fleetgate_limiter_unavailable_total{policy="fail_open"}': "0x20"},
        "10m", [{"policy": "fail_closed"}]),
    ("FleetgateLimiterUnavailable", {
        'fleetgate_limiter_unavailable_total{policy="fail_open"}': "0x20"}, "10m", []),
]  # fmt: skip

_BY_NAME = {a.name: a for a in ALERTS}
_TEMPLATE = re.compile(r"\{\{ \$labels\.(\w+) \}\}")


def _expected(alert: str, labels: dict[str, str]) -> dict[str, Any]:
    rule = _BY_NAME[alert]

    def fill(text: str) -> str:
        return _TEMPLATE.sub(lambda m: labels[m.group(1)], text)

    return {
        "exp_labels": {**labels, "severity": rule.severity},
        "exp_annotations": {"summary": fill(rule.summary), "description": fill(rule.description)},
    }


def _test_file(rules: Path) -> dict[str, Any]:
    tests = []
    for alert, series, at, firing in CASES:
        tests.append({
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [{
                "eval_time": at, "alertname": alert,
                "exp_alerts": [_expected(alert, labels) for labels in firing],
            }],
        })  # fmt: skip
    return {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    firing = {alert for alert, _, _, labels in CASES if labels}
    silent = {alert for alert, _, _, labels in CASES if not labels}
    silent |= {alert for alert, _, _, labels in CASES if labels}  # other label sets stay silent
    assert firing == set(_BY_NAME), set(_BY_NAME) - firing
    assert silent == set(_BY_NAME)


def test_rule_file_is_valid() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alerts_fire_and_stay_silent(tmp_path: Path) -> None:
    spec = tmp_path / "alerts.test.yaml"
    spec.write_text(yaml.safe_dump(_test_file(RULES), sort_keys=False))
    result = _promtool("test", "rules", str(spec))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_notices_a_wrong_expectation(tmp_path: Path) -> None:
    data = _test_file(RULES)
    case = data["tests"][0]["alert_rule_test"][0]
    case["exp_alerts"][0]["exp_labels"]["alias"] = "b"  # the silent alias
    spec = tmp_path / "wrong.test.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _promtool("test", "rules", str(spec)).returncode != 0


def test_the_default_slos_are_the_seeds() -> None:
    """Q1: TTFT P95 < 1 s, TPOT P95 < 50 ms, availability > 99.9%."""
    assert Slos() == Slos(ttft_s=1.0, ttft=0.95, tpot_s=0.05, tpot=0.95, availability=0.999)
    with pytest.raises(ValueError, match="bucket bound"):
        Slos(ttft_s=0.9)  # no bucket at 0.9 s: the alert could not be computed
    with pytest.raises(ValueError, match="share"):
        Slos(availability=99.9)
